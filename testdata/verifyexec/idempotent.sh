#!/bin/sh
# An idempotent command: it records its event's effect only if it is not recorded yet, under a
# lock, since a stale attempt may still run beside the new one.
exec 9>>"$ORDERED_VERIFY_EFFECTS.lock"
flock 9
grep -qx "$ORDERED_KEY $ORDERED_SEQ" "$ORDERED_VERIFY_EFFECTS" ||
	echo "$ORDERED_KEY $ORDERED_SEQ" >>"$ORDERED_VERIFY_EFFECTS"
