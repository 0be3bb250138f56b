#!/usr/bin/env bash
# Refreshes the vendored GraphiQL assets from their npm packages, at the versions below.
# GraphiQL 5 and React 19 ship no UMD builds, so these stay on GraphiQL 4 and React 18,
# whose production UMD files load with plain <script> tags and no bundler.
#
# To update: change a version, run this script, check the page in a browser (or run the
# browser test: cargo test -p kfs-tests --test e2e -- graphiql), and change the versions
# in api/src/http/graphiql/assets.rs to match (they are part of the asset URLs, which
# browsers cache for a year).
set -euo pipefail
cd "$(dirname "$0")"

REACT=18.3.1
GRAPHIQL=4.1.2
EXPLORER=4.0.6

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fetch() { # package version → unpacked into $work/<name>
  local package=$1 version=$2 name=$3
  (cd "$work" && npm pack --silent "$package@$version" >/dev/null)
  mkdir -p "$work/$name"
  tar xzf "$work"/*"$(basename "$package")-$version.tgz" -C "$work/$name" --strip-components 1
}

fetch react "$REACT" react
fetch react-dom "$REACT" react-dom
fetch graphiql "$GRAPHIQL" graphiql
fetch @graphiql/plugin-explorer "$EXPLORER" explorer

cp "$work/react/umd/react.production.min.js" "react-$REACT.production.min.js"
cp "$work/react-dom/umd/react-dom.production.min.js" "react-dom-$REACT.production.min.js"
cp "$work/graphiql/graphiql.min.js" "graphiql-$GRAPHIQL.min.js"
cp "$work/graphiql/graphiql.min.css" "graphiql-$GRAPHIQL.min.css"
cp "$work/explorer/dist/index.umd.js" "plugin-explorer-$EXPLORER.umd.js"
cp "$work/explorer/dist/style.css" "plugin-explorer-$EXPLORER.css"

mkdir -p licenses
cp "$work/react/LICENSE" licenses/react.LICENSE
cp "$work/react-dom/LICENSE" licenses/react-dom.LICENSE
cp "$work/graphiql/LICENSE" licenses/graphiql.LICENSE
# The explorer package ships no LICENSE file; its package.json says MIT, like GraphiQL's
# monorepo, whose license covers it.
cp "$work/graphiql/LICENSE" licenses/plugin-explorer.LICENSE
echo "vendored react $REACT, graphiql $GRAPHIQL, @graphiql/plugin-explorer $EXPLORER"
