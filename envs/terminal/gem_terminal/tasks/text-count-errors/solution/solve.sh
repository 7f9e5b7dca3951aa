#!/bin/bash
set -e
grep -c ERROR /app/app.log > /app/errors.txt
