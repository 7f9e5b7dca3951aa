#!/bin/sh
echo deploying atlas
