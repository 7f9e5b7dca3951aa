#!/bin/bash
answer > /app/answer.txt
