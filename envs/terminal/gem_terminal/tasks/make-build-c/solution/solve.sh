#!/bin/bash
set -e
cd /app && make
