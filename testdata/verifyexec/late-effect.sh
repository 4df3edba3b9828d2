#!/bin/sh
# Out of order: it holds back each key's seq 3 and records it after seq 4 (an order inversion).
exec 9>>"$ORDERED_VERIFY_EFFECTS.lock"
flock 9
record() { grep -qx "$1" "$ORDERED_VERIFY_EFFECTS" || echo "$1" >>"$ORDERED_VERIFY_EFFECTS"; }
case "$ORDERED_SEQ" in
3) ;;
4) record "$ORDERED_KEY 4"; record "$ORDERED_KEY 3" ;;
*) record "$ORDERED_KEY $ORDERED_SEQ" ;;
esac
