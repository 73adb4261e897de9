# Sourced by scripts/test.sh: `apt_get ARGS...` runs apt-get and, when another apt or dpkg run
# (unattended-upgrades, a second CI job) holds its lock, waits for it instead of failing at
# once. DPkg::Lock::Timeout covers the dpkg lock of `install`; `apt-get update`'s lists lock
# ignores that option (apt 2.6), so a busy lock is also retried here until APT_LOCK_WAIT
# seconds have passed. APT_OPTS adds apt-get options (the tests point apt at a temp folder).
APT_LOCK_WAIT=${APT_LOCK_WAIT:-600}

apt_get() {
  local deadline=$((SECONDS + APT_LOCK_WAIT)) out rc
  while :; do
    rc=0
    # shellcheck disable=SC2086  # APT_OPTS is a list of words
    out=$(apt-get -o DPkg::Lock::Timeout="$APT_LOCK_WAIT" ${APT_OPTS:-} "$@" 2>&1) || rc=$?
    if [ "$rc" -ne 0 ] && [ "$SECONDS" -lt "$deadline" ] &&
      printf '%s\n' "$out" | grep -q -e 'Could not get lock' -e 'Unable to lock'; then
      echo "apt-get: another apt/dpkg process holds the lock; waiting (up to ${APT_LOCK_WAIT}s)" >&2
      sleep 3
      continue
    fi
    if [ -n "$out" ]; then
      if [ "$rc" -ne 0 ]; then printf '%s\n' "$out" >&2; else printf '%s\n' "$out"; fi
    fi
    return "$rc"
  done
}
