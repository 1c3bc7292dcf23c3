# shellcheck shell=bash
# The Debian packages of tests/packages.txt, for ./test.sh and .ci/run.
# Source it from the top of the keel tree:
#
#   keel_packages            every package the tests need, one a line
#   keel_missing_packages    those dpkg does not report installed (all of
#                            them where there is no dpkg)
#   keel_can_install         true when run as root on Debian with apt-get
#   keel_install PKG…        apt-get install PKG… (as root)
#   keel_install_line PKG…   that command, as a line to print

keel_apt_install=(apt-get install -y --no-install-recommends)

keel_packages() {
  sed -e 's/#.*//' -e 's/^[[:space:]]*//' tests/packages.txt | awk 'NF { print $1 }'
}

keel_missing_packages() {
  local p
  for p in $(keel_packages); do
    if ! command -v dpkg-query >/dev/null ||
      [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" != "install ok installed" ]; then
      echo "$p"
    fi
  done
}

keel_can_install() {
  [ "$(id -u)" = 0 ] && [ -r /etc/debian_version ] && command -v apt-get >/dev/null
}

keel_install() {
  "${keel_apt_install[@]}" "$@"
}

keel_install_line() {
  echo "${keel_apt_install[*]} $*"
}
