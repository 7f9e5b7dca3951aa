#!/bin/bash
set -e
cd /app/calc && git revert --no-edit HEAD
