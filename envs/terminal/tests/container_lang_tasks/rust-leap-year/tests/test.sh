#!/bin/bash
# The stand-in as rust:1.85 has it: cargo on PATH from CARGO_HOME/bin; the checker's own integration test.
mkdir -p /app/leap/tests && cp /tests/leap.rs /app/leap/tests/leap.rs
cd /app/leap
ok=1
[ "$(command -v cargo)" = /usr/local/cargo/bin/cargo ] || { echo "cargo is $(command -v cargo)"; ok=0; }
cargo test --offline || ok=0
echo $ok > /logs/verifier/reward.txt
