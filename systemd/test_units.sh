#!/usr/bin/env bash
# Checks systemd/ with systemd's own tools (registered in tests/meson.build as systemd_units):
#   1. `systemd-analyze verify` of ktuned.service (a copy whose ExecStart is this build's ktuned,
#      or /bin/true before the daemon is built) with ktuned.socket: exit 0 and nothing printed
#      (verify only warns about unknown keys and bad values, so a warning fails here);
#   2. the installed service differs from the verified copy in ExecStart only;
#   3. every DeviceAllow= is a literal /dev path or a char-/block- group, with rwm flags; UMask
#      and StateDirectoryMode keep other users out, and `systemd-analyze security` rates the
#      unit's exposure 2.7 or better (where --offline is supported);
#   4. systemd-sysusers into a scratch root creates user and group ktune without a login shell;
#   5. systemd-tmpfiles into that root creates /etc/ktune (0755), /var/lib/ktune{,/cache} owned
#      by ktune, 0750, and copies the sample configuration (as root only: it chowns);
#   6. the sample configuration names exactly ktuned's options (`ktuned --help`), when built.
# Exit 77 (skip) when systemd-analyze is not installed.
# usage: test_units.sh TEST_SERVICE INSTALL_SERVICE SOCKET SYSUSERS TMPFILES SAMPLE [KTUNED]
set -uo pipefail
if [ $# -lt 6 ]; then
  echo "usage: $0 TEST_SERVICE INSTALL_SERVICE SOCKET SYSUSERS TMPFILES SAMPLE [KTUNED]" >&2
  exit 2
fi
# absolute paths: systemd-sysusers and systemd-tmpfiles look a bare file name up in their
# configuration directories
for f in "${@:1:6}"; do
  [ -f "$f" ] || { echo "test_units.sh: $f: no such file" >&2; exit 2; }
done
abs() { realpath -- "$1"; }
test_service=$(abs "$1") install_service=$(abs "$2") socket=$(abs "$3") sysusers=$(abs "$4")
tmpfiles=$(abs "$5") sample=$(abs "$6") ktuned=${7:-}
if ! command -v systemd-analyze >/dev/null; then
  echo "SKIP: systemd-analyze is not installed (apt-get install systemd)"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0 failed=0
ok() { echo "ok   $1"; passed=$((passed + 1)); }
bad() { echo "FAIL $1"; failed=$((failed + 1)); }

# 1. verify, in a folder of its own so the units find each other by name
verify() { # DIR -> prints what verify said; returns its status
  (cd "$1" && systemd-analyze verify ktuned.service ktuned.socket 2>&1)
}
mkdir "$tmp/units" "$tmp/broken"
cp "$test_service" "$tmp/units/ktuned.service"
cp "$socket" "$tmp/units/ktuned.socket"
out=$(verify "$tmp/units")
rc=$?
if [ $rc -eq 0 ] && [ -z "$out" ]; then
  ok "systemd-analyze verify ktuned.service ktuned.socket"
else
  bad "systemd-analyze verify (exit $rc): $out"
fi
# ... and the check is live: a misspelt key is reported
sed 's/^NotifyAccess=/NotifyAcess=/' "$test_service" > "$tmp/broken/ktuned.service"
cp "$socket" "$tmp/broken/ktuned.socket"
out=$(verify "$tmp/broken")
if grep -q "NotifyAcess" <<<"$out"; then
  ok "verify reports a misspelt key"
else
  bad "verify said nothing about a misspelt key: $out"
fi

# 2. the installed unit is the verified one, but for ExecStart
if diff <(grep -v '^ExecStart=' "$test_service") <(grep -v '^ExecStart=' "$install_service") \
  >"$tmp/diff"; then
  ok "installed service = verified service but for ExecStart"
else
  bad "installed and verified services differ: $(cat "$tmp/diff")"
fi
grep -q '^ExecStart=/.*/ktuned --config /etc/ktune/ktuned.conf$' "$install_service" &&
  ok "ExecStart: $(grep '^ExecStart=' "$install_service")" ||
  bad "ExecStart of the installed service: $(grep '^ExecStart=' "$install_service")"

# 3. DeviceAllow syntax (verify does not check it: a glob in a path is silently useless)
n=0
while read -r spec flags rest; do
  n=$((n + 1))
  if [ -n "$rest" ] || ! [[ $flags =~ ^[rwm]+$ ]] ||
    ! { [[ $spec =~ ^/dev/[^*?[]+$ ]] || [[ $spec =~ ^(char|block)-[A-Za-z0-9_*?/-]+$ ]]; }; then
    bad "DeviceAllow=$spec $flags $rest"
  fi
done < <(sed -n 's/^DeviceAllow=//p' "$test_service")
[ $n -gt 0 ] && ok "$n DeviceAllow= lines are paths or device groups" || bad "no DeviceAllow="
grep -qx 'DevicePolicy=closed' "$test_service" && ok "DevicePolicy=closed" ||
  bad "DevicePolicy is not closed"

# 3b. what the service creates is not readable by other users (the job journal is in the cache)
grep -qx 'UMask=0027' "$test_service" && grep -qx 'StateDirectoryMode=0750' "$test_service" &&
  ok "UMask=0027, StateDirectoryMode=0750" || bad "UMask or StateDirectoryMode lets others read"
if out=$(cd "$tmp/units" && systemd-analyze security --offline=yes ktuned.service 2>&1); then
  score=$(sed -n 's/.*Overall exposure level for ktuned.service: \([0-9.]*\).*/\1/p' <<<"$out")
  # 2.7 before UMask=0027 too (systemd 252): no worse, and files no longer world-readable
  # (group-readable is meant: deploy-time programs of group ktune read the cache)
  if [ -n "$score" ] && awk -v s="$score" 'BEGIN { exit !(s <= 2.7) }' &&
    ! grep 'UMask=' <<<"$out" | grep -q 'world-readable'; then
    ok "systemd-analyze security: exposure $score"
  else
    bad "systemd-analyze security: exposure '${score}' (at most 2.7), $(grep 'UMask=' <<<"$out")"
  fi
else
  echo "skip security: systemd-analyze security --offline is not supported here"
fi

# 4. sysusers into a scratch root
root="$tmp/root"
mkdir -p "$root/etc" "$root/usr/share/ktune"
if command -v systemd-sysusers >/dev/null; then
  if systemd-sysusers --root="$root" "$sysusers" >"$tmp/sysusers.log" 2>&1; then
    user=$(grep '^ktune:' "$root/etc/passwd" || true)
    shell=${user##*:}
    if [ -n "$user" ] && grep -q '^ktune:' "$root/etc/group" &&
      [[ $shell == */nologin || $shell == */false ]] && [ "$(cut -d: -f6 <<<"$user")" = /var/lib/ktune ]; then
      ok "sysusers: $user"
    else
      bad "sysusers made: '${user}' group: $(grep '^ktune:' "$root/etc/group")"
    fi
  else
    bad "systemd-sysusers: $(cat "$tmp/sysusers.log")"
  fi
else
  echo "skip sysusers: systemd-sysusers is not installed"
fi

# 5. tmpfiles into the same root (resolves ktune there, chowns: root only)
if command -v systemd-tmpfiles >/dev/null && [ "$(id -u)" -eq 0 ] && [ -n "${user:-}" ]; then
  cp "$sample" "$root/usr/share/ktune/ktuned.conf.sample"
  if systemd-tmpfiles --root="$root" --create "$tmpfiles" >"$tmp/tmpfiles.log" 2>&1; then
    uid=$(cut -d: -f3 <<<"$user")
    good=1
    for d in etc/ktune:0:755 var/lib/ktune:$uid:750 var/lib/ktune/cache:$uid:750; do
      IFS=: read -r rel owner mode <<<"$d"
      p=$root/$rel
      [ -d "$p" ] && [ "$(stat -c %u "$p")" = "$owner" ] && [ "$(stat -c %a "$p")" = "$mode" ] ||
        { bad "tmpfiles: $rel: $(stat -c '%U %a' "$p" 2>&1), expected uid $owner mode $mode"; good=0; }
    done
    cmp -s "$sample" "$root/etc/ktune/ktuned.conf" || { bad "tmpfiles: no ktuned.conf copy"; good=0; }
    [ $good -eq 1 ] && ok "tmpfiles: /etc/ktune, /var/lib/ktune/cache (uid $uid, 0750), ktuned.conf"
  else
    bad "systemd-tmpfiles: $(cat "$tmp/tmpfiles.log")"
  fi
else
  echo "skip tmpfiles: needs systemd-tmpfiles, root and the sysusers step"
fi

# 6. the sample's keys are ktuned's options
sample_keys=$(sed -n 's/^#\{0,1\}\([a-z][a-z-]*\) *=.*/\1/p' "$sample" | sort)
if [ -n "$ktuned" ] && [ -x "$ktuned" ]; then
  daemon_keys=$("$ktuned" --help | sed -n 's/^ *--\([a-z][a-z-]*\) .*/\1/p' |
    grep -vxE 'config|help|version' | sort)
  if [ -n "$daemon_keys" ] && [ "$sample_keys" = "$daemon_keys" ]; then
    ok "sample keys = ktuned --help options: $(echo $sample_keys)"
  else
    bad "sample keys [$(echo $sample_keys)] vs ktuned --help [$(echo $daemon_keys)]"
  fi
else
  echo "skip sample keys: ktuned is not built"
fi

echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
