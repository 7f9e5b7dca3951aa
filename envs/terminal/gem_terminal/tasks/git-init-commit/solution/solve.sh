#!/bin/bash
set -e
cd /app/site && git init -q && git add -A && git commit -qm 'initial import'
