#!/bin/sh
# slurmd Prolog (slurm.conf: Prolog=/etc/slurm/prolog.d/gpuwatch.sh, PrologFlags=Alloc so it
# runs when the job is allocated, not at its first step). Runs as root on every node of the
# job: tells the node's gpuwatch agent the job's owner, account and GPUs (SLURM_JOB_GPUS) and,
# from `scontrol show job`, its submit time, for the queue wait.
#
# A prolog that fails or hangs drains the node and requeues the job held (Slurm's
# prolog_epilog docs, "Failure Handling"): `gpuwatch slurm prolog` never fails and bounds itself
# (--timeout), `timeout` bounds it again should the binary itself hang, and this script exits 0
# whatever happened. On large, busy clusters set GPUWATCH_SCONTROL="" to skip scontrol (the
# docs advise against Slurm commands in a prolog; the queue wait is then not known).
# slurmd sets no PATH for its prologs (prolog_epilog docs): say where scontrol may live.
PATH=/usr/local/bin:/usr/bin:/bin:/opt/slurm/bin
export PATH
timeout -k 2 10 /usr/bin/gpuwatch slurm prolog --timeout 5 \
  --scontrol "${GPUWATCH_SCONTROL-scontrol}" || true
exit 0
