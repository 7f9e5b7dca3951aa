#!/bin/bash
set -e
ln -sfn /app/releases/v2 /app/current
