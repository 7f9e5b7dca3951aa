#!/bin/bash
set -e
cat > /app/calc/Makefile <<'MK'
CC = cc
CFLAGS = -O2 -Wall
OBJS = main.o util.o

calc: $(OBJS)
	$(CC) -o calc $(OBJS)

%.o: %.c
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

-include $(OBJS:.o=.d)

.PHONY: clean
clean:
	rm -f calc $(OBJS) $(OBJS:.o=.d)
MK
