#!/bin/bash
set -e
cd /app/proj && printf 'build/\n*.o\n' > .gitignore && git add .gitignore && git commit -qm 'ignore build output'
