# scripts/go-module.sh - sourced by scripts that run a Go program built from the module proxy:
# go_module_build MODULE VERSION PACKAGE BINARY builds MODULE@VERSION's PACKAGE into BINARY once
# (a lock keeps two callers from building it together). The caller defines log and die.
#
# The proxy serves some versions without the module's version list, which `go install
# mod@version` asks for: so the module is downloaded, and built from a copy of its source.

go_module_build() {
  local module=$1 version=$2 package=$3 bin=$4 dir src tmp lock
  [[ -x $bin ]] && return 0
  command -v go >/dev/null || die "go not found (needed once to build $module $version)"
  dir=$(dirname "$bin")
  mkdir -p "$dir"
  exec {lock}>"$dir.lock"
  flock "$lock"
  if [[ ! -x $bin ]]; then
    log "building $module $version into $dir (first run only)"
    src=$(go mod download -json "$module@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
    [[ -d $src ]] || die "go could not download $module@$version (check GOPROXY)"
    tmp=$(mktemp -d "$dir.tmp.XXXX")
    cp -r "$src/." "$tmp" && chmod -R u+w "$tmp"
    (cd "$tmp" && go build -o "$tmp/out" "$package") >"$dir.build.log" 2>&1 ||
      { tail -n 20 "$dir.build.log" >&2; die "go build of $module failed (log: $dir.build.log)"; }
    mv "$tmp/out" "$bin"
    rm -rf "$tmp"
  fi
  exec {lock}>&-
}
