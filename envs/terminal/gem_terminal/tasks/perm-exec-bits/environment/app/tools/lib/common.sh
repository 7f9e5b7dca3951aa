# sourced by the tools, never run
log() { echo "[tools] $*"; }
