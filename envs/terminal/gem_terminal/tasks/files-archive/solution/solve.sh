#!/bin/bash
set -e
cd /app && tar -czf backup.tar.gz docs
