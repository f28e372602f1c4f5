#!/bin/sh
# slurmd Epilog (slurm.conf: Epilog=/etc/slurm/epilog.d/gpuwatch.sh). Runs as root when the
# job ends: tells the node's gpuwatch agent that the allocation is released, with the job's
# exit code (SLURM_JOB_EXIT_CODE2 where slurmd sets it, else `scontrol show job`'s ExitCode).
# Time-boxed and always exit 0: a failing epilog drains the node too.
# slurmd sets no PATH for its prologs (prolog_epilog docs): say where scontrol may live.
PATH=/usr/local/bin:/usr/bin:/bin:/opt/slurm/bin
export PATH
timeout -k 2 10 /usr/bin/gpuwatch slurm epilog --timeout 5 \
  --scontrol "${GPUWATCH_SCONTROL-scontrol}" || true
exit 0
