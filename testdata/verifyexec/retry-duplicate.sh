#!/bin/sh
# Not idempotent: it records its effect, then fails its first attempt of each key's seq 3, so
# the retry records the effect again (a duplicate effect).
echo "$ORDERED_KEY $ORDERED_SEQ" >>"$ORDERED_VERIFY_EFFECTS"
if [ "$ORDERED_SEQ" = 3 ] && [ "$ORDERED_ATTEMPT" = 1 ]; then
	exit 75
fi
