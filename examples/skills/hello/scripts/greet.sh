#!/bin/sh
# Greets $1 using the template in this package, and logs the greeting in
# the writable extensions dir. Runs inside the sandbox.
set -eu
name="${1:-world}"
template="$SCIENCEDISCOVERY_SKILLS_DIR/hello/references/template.txt"
greeting=$(printf "$(cat "$template")" "$name")
echo "$greeting"
mkdir -p "$SCIENCEDISCOVERY_SKILL_EXTENSIONS_DIR/hello"
echo "$greeting" >> "$SCIENCEDISCOVERY_SKILL_EXTENSIONS_DIR/hello/greetings.log"
echo "logged to $SCIENCEDISCOVERY_SKILL_EXTENSIONS_DIR/hello/greetings.log ($(wc -l < "$SCIENCEDISCOVERY_SKILL_EXTENSIONS_DIR/hello/greetings.log") line(s))"
