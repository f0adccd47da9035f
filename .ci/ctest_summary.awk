# Prints the summary of a ctest log: the pass/fail and time lines, and the lists of tests that
# failed or did not run (the first 20 of each list). Used by test.sh and gpu.sh.
function end_list() {
  if (listing && extra > 0) print "  \t... and " extra " more"
  listing = 0
}
/tests passed|tests failed out of|Total Test time/ { end_list(); print "  " $0; next }
/^The following tests/ { end_list(); print "  " $0; listing = 1; listed = 0; extra = 0; next }
listing && /^\t/ {
  if (++listed <= 20) print "  " $0
  else extra++
  next
}
{ end_list() }
END { end_list() }
