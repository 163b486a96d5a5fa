#!/usr/bin/env bash
# Device script of 2026-12-06 (late): the tree whole on the GPU machine, in parts
# (PART: check, pcm, e2e, b24, e2e24). Its parts now live in bench/tree-check.sh, which
# runs them as this script did then; see that script for each part.
exec bash bench/tree-check.sh "$@"
