package sandy

// The shell scripts the provider runs through Sandy's exec. They are POSIX
// sh (dash, bash and busybox ash run them) with GNU or busybox tools. Their
// parameters come in the exec's environment, never in the command text, so
// that no value needs quoting and the command lines of the sandbox's
// processes carry none of them. Each reports on stdout and exits 0 unless
// the shell itself failed; a non-zero exit is therefore never a verdict.

// Paths inside the sandbox; the scripts spell them out.
const (
	workspace = "/workspace"
	stateDir  = "/tmp/.sandstep"
	execDir   = stateDir + "/x" // one directory per exec: out, err, status
	stageDir  = stateDir + "/w" // base64 text of uploads on their way
	// execMarker is in the environment of every process an exec starts.
	execMarker = "SANDSTEP_EXEC_ID"
)

// warmupScript proves that the sandbox runs commands and writes its
// environment ($SS_ENVFILE), which every exec sources.
const warmupScript = `mkdir -p /tmp/.sandstep/x /tmp/.sandstep/w &&
printf '%s' "$SS_ENVFILE" >/tmp/.sandstep/env.$$ &&
mv -f /tmp/.sandstep/env.$$ /tmp/.sandstep/env`

// execScript starts a command in the background (with SS_START set) and
// reports on it.
//
// Start: $SS_CMD runs as /bin/sh -c in $SS_CWD with the sandbox's
// environment, then the exec's variables (names in $SS_ENVN, values in
// $__ssv_<name>), stdin from $SS_IN or /dev/null, stdout and stderr into
// files of the exec's directory x/$SS_ID, and its status written to
// x/$SS_ID/status when it ends ("cwd" if it could not start). It runs in a
// session of its own, and it and everything it starts carry
// SANDSTEP_EXEC_ID=$SS_ID. Starting twice with one id starts once, so the
// request may be retried.
//
// Report: waits up to $SS_W ms for the end or for output beyond offsets
// $SS_OO and $SS_EO (then up to 50 ms more for the end, which usually
// follows: one request instead of two for a short command), then prints
//
//	S <status or -> <stdout size> <stderr size>
//	<up to $SS_C bytes of stdout from $SS_OO, base64>
//	E
//	<up to $SS_C bytes of stderr from $SS_EO, base64>
//	Z
//
// or "gone". Once it has reported the status and the last output, it renames
// the directory to *.done, which a later start removes after a minute; a
// repeated report still finds it there.
const execScript = `X=/tmp/.sandstep/x
D=$X/$SS_ID
if [ -n "$SS_START" ] && { mkdir "$D" 2>/dev/null || { [ ! -d "$X" ] && mkdir -p "$X" && mkdir "$D"; }; }; then
	for d in "$X"/*.done; do
		[ -e "$d" ] && find "$X" -mindepth 1 -maxdepth 1 -name '*.done' -mmin +1 -exec rm -rf {} + 2>/dev/null
		break
	done
	: >"$D/out"
	: >"$D/err"
	S=
	command -v setsid >/dev/null 2>&1 && S=setsid
	SANDSTEP_EXEC_ID=$SS_ID $S /bin/sh -c '
D=$1
(
	__ss_c=$SS_CMD __ss_w=$SS_CWD __ss_i=${SS_IN:-/dev/null} __ss_n=$SS_ENVN
	unset SS_ID SS_START SS_CMD SS_CWD SS_IN SS_ENVN SS_OO SS_EO SS_C SS_W
	[ -f /tmp/.sandstep/env ] && . /tmp/.sandstep/env
	for __ss_k in $__ss_n; do eval "export $__ss_k=\"\${__ssv_$__ss_k}\"; unset __ssv_$__ss_k"; done
	cd "$__ss_w" 2>"$D/err" || { : >"$D/cwdfail"; exit 1; }
	exec /bin/sh -c "$__ss_c" <"$__ss_i" >"$D/out" 2>"$D/err"
)
s=$?
[ -e "$D/cwdfail" ] && s=cwd
[ -n "$SS_IN" ] && rm -f "$SS_IN"
echo "$s" >"$D/s.tmp" && mv "$D/s.tmp" "$D/status"
' sandstep-exec "$D" </dev/null >/dev/null 2>&1 &
fi
[ -d "$D" ] || D=$D.done
if [ ! -d "$D" ]; then echo gone; exit 0; fi
oo=$SS_OO eo=$SS_EO C=$SS_C W=$SS_W
sz() { if [ -s "$1" ]; then n=$(wc -c <"$1"); n=$((n)); else n=0; fi; }
f=1 t=2 w=0 g=
while [ "$w" -lt "$W" ] && [ ! -f "$D/status" ]; do
	if [ -z "$g" ]; then
		sz "$D/out"; o=$n
		sz "$D/err"; e=$n
		if [ "$o" -gt "$oo" ] || [ "$e" -gt "$eo" ]; then g=$w t=10; fi
	elif [ $((w - g)) -ge 50 ]; then
		break
	fi
	if [ -n "$f" ]; then
		case $t in ?) s=0.00$t ;; ??) s=0.0$t ;; *) s=0.$t ;; esac
		if sleep "$s" 2>/dev/null; then
			w=$((w + t))
			[ -n "$g" ] || t=$((t < 125 ? t * 2 : 250))
			continue
		fi
		f=
	fi
	sleep 1
	w=$((w + 1000))
done
st=-
[ -f "$D/status" ] && read -r st <"$D/status"
sz "$D/out"; o=$n
sz "$D/err"; e=$n
echo "S $st $o $e"
part() {
	if [ "$2" -eq 0 ] && [ "$3" -le "$C" ]; then base64 <"$1"
	else tail -c +"$(($2 + 1))" "$1" | head -c "$C" | base64
	fi
}
[ "$o" -gt "$oo" ] && part "$D/out" "$oo" "$o"
echo E
[ "$e" -gt "$eo" ] && part "$D/err" "$eo" "$e"
echo Z
case $D in
*.done) ;;
*) if [ "$st" != - ] && [ $((o - oo)) -le "$C" ] && [ $((e - eo)) -le "$C" ]; then mv "$D" "$D.done" 2>/dev/null; fi ;;
esac
exit 0`

// killScript kills every process of exec $SS_ID, round after round until
// none is left (a zombie has no environment, so the dead drop out), marks
// the exec "killed" unless it had ended, and with $SS_FINAL renames its
// directory to *.done. It removes the stdin file $SS_IN.
const killScript = `D=/tmp/.sandstep/x/$SS_ID
m="SANDSTEP_EXEC_ID=$SS_ID"
z=
printf 'a\000' | grep -qzx a 2>/dev/null && z=1
f=
sleep 0.001 2>/dev/null && f=1
r=0
while [ "$r" -lt 300 ]; do
	if [ -n "$z" ]; then
		p=$(grep -lzxF -- "$m" /proc/[0-9]*/environ 2>/dev/null)
	else
		p=$(for e in /proc/[0-9]*/environ; do tr '\000' '\n' <"$e" 2>/dev/null | grep -qxF -- "$m" && echo "$e"; done)
	fi
	[ -z "$p" ] && break
	for e in $p; do
		e=${e#/proc/}
		kill -9 "${e%/environ}" 2>/dev/null
	done
	r=$((r + 1))
	if [ -n "$f" ]; then sleep 0.01; else sleep 1; fi
done
if [ -d "$D" ]; then
	[ -f "$D/status" ] || { echo killed >"$D/s.tmp" && mv "$D/s.tmp" "$D/status"; }
	[ -n "$SS_FINAL" ] && mv "$D" "$D.done"
fi
[ -n "$SS_IN" ] && rm -f "$SS_IN"
echo "K $r"
exit 0`

// metaScript describes file $SS_P for a read from offset $SS_O of at most
// $SS_L bytes (-1: to the end): "dir", "none", or "ok <size> <utf8>" where
// utf8 is 1 or 0 when iconv could tell, "-" otherwise. When the range holds
// at most $SS_C bytes it follows, base64; then "Z". The UTF-8 check runs only
// for whole-file reads ($SS_FULL) too large to come back at once.
const metaScript = `P=$SS_P
if [ -d "$P" ]; then echo dir; exit 0; fi
if [ ! -e "$P" ]; then echo none; exit 0; fi
s=$(wc -c <"$P") || { echo unreadable; exit 0; }
s=$((s)) o=$SS_O l=$SS_L
[ "$o" -gt "$s" ] && o=$s
n=$((s - o))
[ "$l" -ge 0 ] && [ "$l" -lt "$n" ] && n=$l
if [ "$n" -le "$SS_C" ]; then
	echo "ok $s -"
	[ "$n" -gt 0 ] && tail -c +"$((o + 1))" "$P" | head -c "$n" | base64
	echo Z
	exit 0
fi
u=-
if [ -n "$SS_FULL" ] && command -v iconv >/dev/null 2>&1; then
	if iconv -f UTF-8 -t UTF-8 "$P" >/dev/null 2>&1; then u=1; else u=0; fi
fi
echo "ok $s $u"
echo Z
exit 0`

// chunkScript prints "ok", at most $SS_N bytes of file $SS_P from offset
// $SS_O base64, and "Z"; or "none".
const chunkScript = `if [ ! -f "$SS_P" ]; then echo none; exit 0; fi
echo ok
tail -c +"$((SS_O + 1))" "$SS_P" | head -c "$SS_N" | base64
echo Z
exit 0`

// writeScript builds file $SS_P in temporary file $SS_T next to it. With
// $SS_FIRST it creates the parents and an empty $SS_T; it then appends the
// base64 in staged file $SS_S (which must hold $SS_SL bytes, else "short")
// and in $SS_B; with $SS_LAST it sets mode $SS_MODE and renames $SS_T to
// $SS_P. It prints "ok", "short", "isdir" or "fail" (reason on stderr).
const writeScript = `P=$SS_P T=$SS_T
if [ -n "$SS_FIRST" ]; then
	if [ -d "$P" ]; then echo isdir; exit 0; fi
	d=${P%/*}
	[ -n "$d" ] || d=/
	mkdir -p -- "$d" || { echo fail; exit 0; }
	: >"$T" || { echo fail; exit 0; }
fi
if [ -n "$SS_S" ]; then
	n=$(wc -c <"$SS_S" 2>/dev/null)
	if [ "$((n))" -ne "$SS_SL" ]; then rm -f "$SS_S"; echo short; exit 0; fi
	base64 -d <"$SS_S" >>"$T" || { rm -f "$SS_S"; echo fail; exit 0; }
	rm -f "$SS_S"
fi
if [ -n "$SS_B" ]; then
	printf '%s' "$SS_B" | base64 -d >>"$T" || { echo fail; exit 0; }
fi
if [ -n "$SS_LAST" ]; then
	if [ -d "$P" ]; then rm -f "$T"; echo isdir; exit 0; fi
	chmod "$SS_MODE" "$T" && mv -f "$T" "$P" || { rm -f "$T"; echo fail; exit 0; }
fi
echo ok
exit 0`

// cleanupScript removes what a failed write left: $SS_T and the staged
// files $SS_W.*.
const cleanupScript = `rm -f "$SS_T" "$SS_W".*
exit 0`

// listScript lists directory $SS_P: "none", "notdir", or "ok gnu" followed
// by base64 of NUL-terminated "type mode size mtime name" records (GNU
// find), or "ok stat" followed by base64 of "rawmode size mtime path" lines
// (any find and stat); then "Z".
const listScript = `P=$SS_P
if [ ! -e "$P" ]; then echo none; exit 0; fi
if [ ! -d "$P" ]; then echo notdir; exit 0; fi
if find "$P" -maxdepth 0 -printf '' >/dev/null 2>&1; then
	echo ok gnu
	find "$P" -mindepth 1 -maxdepth 1 -printf '%y %m %s %T@ %f\0' | base64
else
	echo ok stat
	find "$P" -mindepth 1 -maxdepth 1 -exec stat -c '%f %s %Y %n' {} + | base64
fi
echo Z
exit 0`
