# incus_sync's helper (sync.go), run in the instance as
#   sh -c SCRIPT SCRIPT COMMAND ARGS...
# ($0 is the script itself, so that find can run it again). It uses only
# what Debian and busybox both have: sh, find, stat, readlink, sha256sum,
# cp, mv, rm, mkdir, chmod, chown, touch. Every record it writes is
# NUL-terminated: a name (which may hold a newline) is never split.
set -u
umask 022
fmt='%f %s %Y %u %g'

# st PATH: its stat line, or "-".
st() { stat -c "$fmt" "$1" 2>/dev/null || printf -; }

# sum PATH: its sha256, or "-".
sum() {
	x=$({ sha256sum <"$1"; } 2>/dev/null) || x=-
	printf '%s' "${x%% *}"
}

# tmp REL: the temporary name of REL beside it in DEST.
tmp() {
	case $1 in
	*/*) printf '%s/%s' "$DEST" "${1%/*}/.${1##*/}.migrate-tmp" ;;
	*) printf '%s/%s' "$DEST" ".$1.migrate-tmp" ;;
	esac
}

fail() { printf 'E\0%s\0' "$1"; exit 3; }

# The operations of a work file (written by sync.go, names single-quoted).

# C REL: copy SRC/REL to DEST/REL through a temporary name, mode, owner
# and mtime kept; the source is stat'ed before and both sides hashed
# after.
C() {
	s=$SRC/$1 d=$DEST/$1 t=$(tmp "$1")
	rm -rf "$t"
	ss=$(st "$s")
	if ! cp -a "$s" "$t"; then
		rm -rf "$t"
		if [ -e "$s" ] || [ -L "$s" ]; then fail "$1"; fi
		printf 'V\0%s\0' "$1"
		return 0
	fi
	hs=- hd=-
	if [ -f "$t" ] && [ ! -L "$t" ]; then
		hs=$(sum "$s") hd=$(sum "$t")
	fi
	# mv onto a link to a directory, or a directory, would move into it.
	if [ -L "$d" ] || [ -d "$d" ]; then rm -rf "$d" || fail "$1"; fi
	mv -f "$t" "$d" || fail "$1"
	printf 'C\0%s\0%s\0%s\0%s\0%s\0' "$1" "$hs" "$hd" "$ss" "$(st "$d")"
}

# H REL: hash both sides, each stat'ed before.
H() {
	s=$SRC/$1 d=$DEST/$1
	ss=$(st "$s") ds=$(st "$d")
	printf 'H\0%s\0%s\0%s\0%s\0%s\0' "$1" "$(sum "$s")" "$(sum "$d")" "$ss" "$ds"
}

# K REL: hash both sides; copy when they differ.
K() {
	s=$SRC/$1 d=$DEST/$1
	ss=$(st "$s") ds=$(st "$d")
	hs=$(sum "$s") hd=$(sum "$d")
	printf 'H\0%s\0%s\0%s\0%s\0%s\0' "$1" "$hs" "$hd" "$ss" "$ds"
	if [ "$hs" != "$hd" ] || [ "$hs" = - ]; then C "$1"; fi
}

# D REL UID:GID MODE: a directory, with that owner and mode.
D() {
	mkdir -p "$DEST/$1" && chown "$2" "$DEST/$1" && chmod "$3" "$DEST/$1" || fail "$1"
}

# X REL: remove DEST/REL, whatever it is.
X() { rm -rf "$DEST/$1" || fail "$1"; }

case $1 in
_stat) # PATH...: their stat lines, in one stat if all are there
	shift
	if o=$(stat -c "$fmt" "$@" 2>/dev/null); then
		printf 'N %d\0' $#
		printf '%s\0' "$@"
		printf '%s\0' "$o"
	else
		for n; do
			if o=$(stat -c "$fmt" "$n" 2>/dev/null); then printf 'N 1\0%s\0%s\0' "$n" "$o"; fi
		done
	fi
	;;
_link) # PATH...: their targets
	shift
	for n; do
		if t=$(readlink "$n" && printf x); then printf 'L\0%s\0%s\0' "$n" "${t%?x}"; fi
	done
	;;
list) # STAMP ROOT...: the time (from STAMP, if not ""), then every entry under each root
	stamp=$2
	shift 2
	if [ -n "$stamp" ]; then
		touch "$stamp" && printf 'T %s\0' "$(stat -c %Y "$stamp")" && rm -f "$stamp" || exit 4
	fi
	i=0
	for r; do
		printf 'R %d\0' $i
		i=$((i + 1))
		if [ ! -e "$r" ]; then
			printf 'M\0'
		elif [ ! -d "$r" ]; then
			printf 'F\0'
		else
			# {''}: the script's own text (an argument of find's -exec)
			# must not hold the two braces side by side.
			(cd "$r" && find . -exec sh -c "$0" "$0" _stat {''} + && find . -type l -exec sh -c "$0" "$0" _link {''} +) || printf 'W\0'
		fi
	done
	printf 'Z\0'
	;;
prep) # DEST STATE: make them (and their parents)
	mkdir -p "$2" "$3" || exit 4
	;;
run) # WORK SRC DEST: the operations of the work file
	SRC=$3 DEST=$4
	. "$2"
	rm -f "$2"
	printf 'Z\0'
	;;
remove) # DEST ALL MANIFEST WORK: remove DEST's manifest and work file, and DEST itself if ALL is 1
	if [ "$3" = 1 ]; then rm -rf "$2" || exit 4; fi
	rm -f "$4" "$5" || exit 4
	;;
*)
	echo "incus_sync helper: unknown command $1" >&2
	exit 2
	;;
esac
