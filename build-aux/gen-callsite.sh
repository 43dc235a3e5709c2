#!/bin/sh
# Writes include/tapegrad_callsite.h on stdout, from the public headers'
# declarations:  sh build-aux/gen-callsite.sh [INCLUDE_DIR] >tapegrad_callsite.h
# (`make callsite` does this in the source tree; tests/callsite.test checks
# that the committed header is what this prints). POSIX sh, awk, sed, sort:
# nothing a fresh Debian with build-essential lacks.
#
# The public headers are those in INCLUDE_DIR (default: include/ beside this
# script's directory) that include "tapegrad_callsite.h": each ends by
# defining <GUARD>_DECLARED (tapegrad_nn.h: TAPEGRAD_NN_H_DECLARED) and
# including it, so its section of macros is defined once its declarations
# are complete, whatever order the headers are included in. Every function
# a header declares that returns `tg_tensor *` gets a macro, except those
# in `skip` below. The output is laid out as clang-format (14, with the
# committed .clang-format) leaves it, so tests/format.test holds for it.
set -eu
LC_ALL=C
export LC_ALL

dir=${1:-$(dirname "$0")/../include}
out=tapegrad_callsite.h

# Functions that return a tensor but make none: no op runs inside them, so
# there is no call site to record, and tg_check_result, which releases its
# result on an anomaly, must not release a borrowed one. (Keep in step with
# the headers: a name here that is no longer declared is an error.)
#   tg_retain, tg_keep   return their argument
#   tg_grad              borrowed: the gradient the tensor holds
#   tg_params_get        borrowed: the module's parameter
#   tg_custom_saved      borrowed: what a custom op's forward saved
#   tg_check_result      what every macro calls; wrapped, it would wrap itself
skip="tg_check_result tg_custom_saved tg_grad tg_keep tg_params_get tg_retain
tg_scope_return"

# Functions that make no tensor but whose errors name the caller's line (a
# released tensor used, an in-place write refused, a backward that fails):
# a macro records the call site and calls them as they are (TG_SITE_), for
# whatever they return. tg_keep, tg_retain and tg_scope_return return their
# argument: a call site, no tg_check_result; tg_grad returns a borrowed
# tensor, as do the accessors. Not tg_fprint: its first
# argument is often stdout, which glibc defines as a macro of itself, and
# clang -Weverything flags that inside a macro's arguments.
sited="tg_add_ tg_backward tg_backward_retain tg_backward_with tg_copy_ tg_custom
tg_copy_in tg_copy_out tg_fill_ tg_get tg_item tg_keep tg_mul_
tg_print tg_release tg_retain tg_scope_end tg_scope_return tg_set
tg_set_name tg_zero_ tg_ndim tg_size tg_shape tg_stride tg_numel tg_grad
tg_set_requires_grad tg_zero_grad tg_format tg_name"

headers=
for f in "$dir"/*.h; do
    base=${f##*/}
    [ "$base" = "$out" ] && continue
    grep -q "^#include \"$out\"" "$f" || continue
    headers="$headers $base"
done
[ -n "$headers" ] || {
    echo "gen-callsite: no header in $dir includes $out" >&2
    exit 1
}

# The code of a header without comments, string contents or preprocessor
# lines, one declaration per line (split at ; { and }).
declarations() {
    awk '
    BEGIN { inblock = 0; inpp = 0 }
    {
        line = $0
        pp = inpp || (!inblock && line ~ /^[ \t]*#/)
        inpp = pp && line ~ /\\$/
        code = ""
        i = 1
        n = length(line)
        while (i <= n) {
            c = substr(line, i, 1)
            two = substr(line, i, 2)
            if (inblock) {
                if (two == "*/") { inblock = 0; i += 2; code = code " " }
                else i++
            } else if (two == "/*") {
                inblock = 1; i += 2
            } else if (two == "//") {
                break
            } else if (c == "\"" || c == "\047") {
                j = i + 1
                while (j <= n && substr(line, j, 1) != c)
                    j += (substr(line, j, 1) == "\\") ? 2 : 1
                code = code c c
                i = j + 1
            } else {
                code = code c; i++
            }
        }
        if (!pp)
            printf "%s ", code
    }
    END { print "" }' "$1" | tr ';{}' '\n\n\n'
}

# The names of the functions that return a tensor, sorted.
tensor_functions() {
    sp='[[:space:]]*'
    declarations "$1" |
        sed -n "s/^${sp}tg_tensor$sp\\*$sp\\(tg_[a-z0-9_]*\\)$sp(.*/\\1/p" |
        sort -u
}

# The names of all the functions a header declares, sorted.
declared_functions() {
    declarations "$1" |
        sed -n 's/^[^(]*[[:space:]*]\(tg_[a-z0-9_]*\)[[:space:]]*(.*/\1/p' |
        sort -u
}

all=$(for h in $headers; do tensor_functions "$dir/$h"; done)
every=$(for h in $headers; do declared_functions "$dir/$h"; done)
for s in $sited; do
    printf '%s\n' "$every" | grep -qx "$s" || {
        echo "gen-callsite: $s is in the sited list but not declared" >&2
        exit 1
    }
done
for s in $skip; do
    printf '%s\n' "$all" | grep -qx "$s" || {
        echo "gen-callsite: $s is in the skip list but not declared" >&2
        exit 1
    }
done

cat <<'EOF'
/* tapegrad call sites: every public function that returns a new tensor is
 * wrapped in a macro of its own name that first records the caller's
 * __FILE__:__LINE__ (tg_set_callsite), then passes the result through
 * tg_check_result, which turns an anomaly found inside the call (anomaly
 * mode) into NULL and an error naming that line. A few functions that
 * return no new tensor (tg_release, the in-place updates, backward...) get
 * a macro that records the call site alone (TG_SITE_), so that their
 * errors name your line too. Each macro calls the real function by its
 * name in parentheses, "(tg_add)(...)", which no function-like macro
 * expands (so clang's -Wdisabled-macro-expansion has nothing to flag);
 * taking a function's address (no parentheses) is untouched.
 *
 * GENERATED by build-aux/gen-callsite.sh from the public headers'
 * declarations: do not edit; run `make callsite` after changing them
 * (tests/callsite.test fails until then).
 *
 * One section per public header, included again at the end of each: a
 * section is defined once, and only after its header has defined its
 * <GUARD>_DECLARED marker, since a function-like macro defined before its
 * function's prototype would expand inside the prototype. Define
 * TG_NO_CALLSITES to do without (the library itself is built that way, so
 * nested calls keep the user's line). No include guard, on purpose. */
#ifndef TG_NO_CALLSITES

#ifndef TG_CALL_
#define TG_CALL_(fn, call)                                                     \
    (tg_set_callsite(__FILE__, __LINE__), tg_check_result((call), #fn))
#define TG_SITE_(call) (tg_set_callsite(__FILE__, __LINE__), (call))
#endif
EOF

for h in $headers; do
    guard=$(printf '%s\n' "$h" | tr 'a-z.' 'A-Z_')
    awk -v def="#define ${guard}_DECLARED" -v inc="#include \"$out\"" '
        $0 == def { seen = 1 }
        $0 == inc { ok = seen }
        END { exit !ok }' "$dir/$h" || {
        echo "gen-callsite: $h must define ${guard}_DECLARED before" \
            "it includes $out" >&2
        exit 1
    }
    names=$(tensor_functions "$dir/$h" | grep -vxF "$(printf '%s\n' $skip)" || true)
    sites=$(declared_functions "$dir/$h" | grep -xF "$(printf '%s\n' $sited)" || true)
    names=$(printf '%s\n%s\n' "$names" "$sites" | sed '/^$/d' | sort -u)
    echo
    if [ -z "$names" ]; then
        echo "/* $h: none of its functions returns a new tensor. */"
        continue
    fi
    echo "/* $h */"
    echo "#ifdef ${guard}_DECLARED"
    echo "#ifndef ${guard}_CALLSITES"
    echo "#define ${guard}_CALLSITES"
    echo
    # clang-format's layout: a macro that fits in 80 columns stays on one
    # line, and a run of those has its bodies aligned (AlignConsecutiveMacros)
    # to the longest name in the run; one that does not fit breaks after the
    # name, with the backslash in column 80, and ends the run; a body too
    # long for its own line breaks again after the first argument.
    printf '%s\n' "$names" | awk -v sited=" $(echo $sited) " '
    function call(name) {
        if (index(sited, " " name " "))
            return "TG_SITE_((" name ")(__VA_ARGS__))"
        return "TG_CALL_(" name ", (" name ")(__VA_ARGS__))"
    }
    function pad(s, w) { while (length(s) < w) s = s " "; return s }
    function flush(   k) {
        for (k = 1; k <= nrun; k++)
            print pad("#define " run[k] "(...)", width) " " call(run[k])
        nrun = 0; width = 0
    }
    {
        name = $0
        head = "#define " name "(...)"
        one = head " " call(name)
        if (length(one) <= 80) {
            run[++nrun] = name
            if (length(head) > width) width = length(head)
            next
        }
        flush()
        if (length(name) > 50) {
            print "gen-callsite: " name " is too long a name to lay out" > "/dev/stderr"
            exit 1
        }
        print pad(head, 79) "\\"
        body = "    " call(name)
        if (length(body) <= 80) {
            print body
        } else if (index(sited, " " name " ")) {
            print pad("    TG_SITE_(", 79) "\\"
            print "        (" name ")(__VA_ARGS__))"
        } else {
            print pad("    TG_CALL_(" name ",", 79) "\\"
            print "             (" name ")(__VA_ARGS__))"
        }
    }
    END { flush() }'
    echo
    echo "#endif /* ${guard}_CALLSITES */"
    echo "#endif /* ${guard}_DECLARED */"
done

cat <<'EOF'

#endif /* TG_NO_CALLSITES */
EOF
