#!/bin/sh
echo building atlas
