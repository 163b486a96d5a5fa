# Second device call (same lease as device-run-1.sh, same binaries at b0702ad): balanced
# without merging at 110 and 120 req/s, then with --prefill-with-step true at 10, 40, 130.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/nvidia/lib64; P=$OUT
OUT=/tmp/o PACK=$P/e2e-plain.tgz LABEL=plain RATES="110 120" BENCH_ARGS=--raw bash bench/e2e-sweep.sh
OUT=/tmp/o PACK=$P/e2e-merge2.tgz LABEL=merge2 SERVE_ARGS="--prefill-with-step true" RATES="10 40 130" BENCH_ARGS=--raw bash bench/e2e-sweep.sh
