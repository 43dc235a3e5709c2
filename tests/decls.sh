# Sourced by the scripts that read the public headers as text
# (tests/errors_coverage.test, tests/ops_list.test).

# Its input as one line, without /* */ comments.
strip_comments() {
    tr '\n' ' ' | sed -E 's:/\*([^*]|\*+[^*/])*\*+/::g'
}

# The declarations of the headers given, as one line without comments:
# preprocessor lines (with their continuations) removed first, so the
# call-site macros add nothing.
header_decls() {
    for h in "$@"; do
        awk '/^[ \t]*#/ { more = /\\$/; next } more { more = /\\$/; next } { print }' "$h"
    done | strip_comments
}
