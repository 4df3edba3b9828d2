#!/bin/sh
# Claims done without doing anything for key-002: its effects are missing. The other keys'
# effects are recorded once each, with the claim version.
[ "$ORDERED_KEY" = key-002 ] && exit 0
exec 9>>"$ORDERED_VERIFY_EFFECTS.lock"
flock 9
grep -q "^$ORDERED_KEY $ORDERED_SEQ " "$ORDERED_VERIFY_EFFECTS" ||
	echo "$ORDERED_KEY $ORDERED_SEQ $ORDERED_CLAIM_VERSION" >>"$ORDERED_VERIFY_EFFECTS"
