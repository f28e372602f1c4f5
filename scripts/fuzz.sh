#!/usr/bin/env bash
# Builds the fuzz targets with clang's libFuzzer (+ASan/UBSan) and runs each for SECONDS
# (default 60). Seeds are the parser fixtures (read only: libFuzzer writes what it finds into
# build/fuzz/corpus/<target>, its first corpus directory). Crashes land in build/fuzz/crash-*.
#   scripts/fuzz.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-60}
scripts/deps.sh build
for p in clang libclang-rt-14-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || \
    { [ "$(id -u)" -eq 0 ] || SUDO=sudo; ${SUDO:-} apt-get install -y -qq "$p" >/dev/null; }
done
mkdir -p build/fuzz && cd build/fuzz
FLAGS="-std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -I../../src"
COMMON=$(ls ../../src/common/*.cc ../../src/model/*.cc | grep -v -e _test.cc -e _fuzz.cc -e _bench.cc)
clang++ $FLAGS -o attribution_fuzz ../../src/collect/attribution_fuzz.cc ../../src/collect/attribution.cc $COMMON -lfmt
clang++ $FLAGS -o time_source_fuzz ../../src/collect/time_source_fuzz.cc ../../src/collect/time_source.cc \
  $COMMON -lfmt
clang++ $FLAGS -o kmsg_fuzz ../../src/logs/kmsg_fuzz.cc ../../src/logs/kmsg.cc \
  ../../src/logs/log_classify.cc $COMMON -lfmt
clang++ $FLAGS -o kernel_log_fuzz ../../src/logs/kernel_log_fuzz.cc ../../src/logs/kernel_log.cc \
  ../../src/logs/kmsg.cc ../../src/logs/internal/stamps.cc $COMMON -lfmt
clang++ $FLAGS -o launcher_log_fuzz ../../src/logs/launcher_log_fuzz.cc ../../src/logs/launcher_log.cc \
  ../../src/logs/internal/stamps.cc $COMMON -lfmt
clang++ $FLAGS -o smi_text_fuzz ../../src/collect/smi_text_fuzz.cc ../../src/collect/smi_text.cc $COMMON -lfmt
clang++ $FLAGS -o template_rules_fuzz ../../src/jobs/template_rules_fuzz.cc \
  ../../src/jobs/template_rules.cc $COMMON -lfmt
clang++ $FLAGS -o job_protocol_fuzz ../../src/jobs/job_protocol_fuzz.cc ../../src/jobs/job_protocol.cc \
  ../../src/jobs/job_registry.cc ../../src/collect/attribution.cc $COMMON -lfmt
clang++ $FLAGS -o topo_fuzz ../../src/topo/topo_fuzz.cc ../../src/topo/topo_text.cc \
  ../../src/topo/topology.cc $COMMON -lfmt
clang++ $FLAGS -o nccl_fuzz ../../src/nccl/nccl_fuzz.cc ../../src/nccl/nccl_log.cc \
  ../../src/nccl/nccl_analysis.cc $COMMON -lfmt
clang++ $FLAGS -o nccl_tests_fuzz ../../src/nccl/nccl_tests_fuzz.cc ../../src/nccl/nccl_tests.cc \
  ../../src/nccl/linkbase.cc ../../src/nccl/nccl_log.cc $COMMON -lfmt
clang++ $FLAGS -o trace_reader_fuzz ../../src/trace/trace_reader_fuzz.cc ../../src/trace/trace_reader.cc \
  ../../src/trace/trace_records.cc $COMMON -lfmt -lz -lzstd
clang++ $FLAGS -o cli_fuzz ../../src/cli/cli_fuzz.cc ../../src/cli/config_file.cc \
  ../../src/server/listen_address.cc $COMMON -lfmt
clang++ $FLAGS -o alerts_fuzz ../../src/analyze/alerts_fuzz.cc ../../src/analyze/alerts.cc \
  ../../src/analyze/finding.cc $COMMON -lfmt
clang++ $FLAGS -o baseline_fuzz ../../src/analyze/baseline_fuzz.cc ../../src/analyze/baseline.cc \
  ../../src/trace/trace_reader.cc ../../src/trace/trace_records.cc $COMMON -lfmt -lz -lzstd
clang++ $FLAGS -o request_parser_fuzz ../../src/http/request_parser_fuzz.cc ../../src/http/request_parser.cc \
  $COMMON -lfmt
clang++ $FLAGS -o sacct_fuzz ../../src/accounting/sacct_fuzz.cc ../../src/accounting/sacct.cc \
  ../../src/accounting/ledger.cc ../../src/trace/trace_reader.cc ../../src/trace/trace_records.cc \
  ../../src/store/wal.cc ../../src/store/internal/file_util.cc $COMMON -lfmt -lz -lzstd
clang++ $FLAGS -o forwarded_fuzz ../../src/http/forwarded_fuzz.cc ../../src/http/forwarded.cc \
  $COMMON -lfmt
STORE="../../src/store/chunkenc.cc ../../src/store/labels.cc ../../src/store/remote_write.cc"
clang++ $FLAGS -o chunkenc_fuzz ../../src/store/chunkenc_fuzz.cc $STORE $COMMON -lfmt -lz -lre2 -lsnappy
clang++ $FLAGS -o selector_fuzz ../../src/store/selector_fuzz.cc $STORE $COMMON -lfmt -lz -lre2 -lsnappy
clang++ $FLAGS -o remote_write_fuzz ../../src/store/remote_write_fuzz.cc $STORE $COMMON -lfmt -lz -lre2 -lsnappy
clang++ $FLAGS -o promql_fuzz ../../src/query/promql_fuzz.cc ../../src/query/promql.cc \
  ../../src/query/engine.cc ../../src/store/rollup.cc $STORE $COMMON -lfmt -lz -lre2 -lsnappy
clang++ $FLAGS -o user_rules_fuzz ../../src/server/user_rules_fuzz.cc ../../src/server/user_rules.cc \
  ../../src/analyze/finding.cc ../../src/query/promql.cc ../../src/query/engine.cc \
  ../../src/store/rollup.cc $STORE $COMMON -lfmt -lz -lre2 -lsnappy
clang++ $FLAGS -o block_fuzz ../../src/store/block_fuzz.cc ../../src/store/block.cc \
  ../../src/store/series_index.cc ../../src/store/internal/file_util.cc $STORE $COMMON -lfmt -lz -lre2 -lsnappy
clang++ $FLAGS -o event_store_fuzz ../../src/store/event_store_fuzz.cc ../../src/store/event_store.cc \
  ../../src/store/wal.cc ../../src/store/internal/file_util.cc $COMMON -lfmt -lz
mkdir -p corpus/chunkenc && ./chunkenc_fuzz -max_total_time="$SECS" corpus/chunkenc ../../tests/fixtures/chunks
mkdir -p corpus/selector && ./selector_fuzz -max_total_time="$SECS" corpus/selector ../../tests/fixtures/selectors
mkdir -p corpus/remote_write && ./remote_write_fuzz -max_total_time="$SECS" corpus/remote_write ../../tests/fixtures/remote_write
mkdir -p corpus/promql && ./promql_fuzz -max_total_time="$SECS" corpus/promql ../../tests/fixtures/promql
mkdir -p corpus/block && ./block_fuzz -max_total_time="$SECS" corpus/block ../../tests/fixtures/blocks
mkdir -p corpus/event_store && ./event_store_fuzz -max_total_time="$SECS" corpus/event_store ../../tests/fixtures/events
mkdir -p corpus/attribution && ./attribution_fuzz -max_total_time="$SECS" corpus/attribution ../../tests/fixtures/root/proc ../../tests/fixtures/root-corrupt/proc
mkdir -p corpus/time_source && ./time_source_fuzz -max_total_time="$SECS" corpus/time_source ../../tests/fixtures/timesource
mkdir -p corpus/kmsg && ./kmsg_fuzz -max_total_time="$SECS" corpus/kmsg ../../tests/fixtures/kmsg
mkdir -p corpus/kernel_log && ./kernel_log_fuzz -max_total_time="$SECS" corpus/kernel_log ../../tests/fixtures/explain/kernel
mkdir -p corpus/launcher_log && ./launcher_log_fuzz -max_total_time="$SECS" corpus/launcher_log ../../tests/fixtures/explain/launcher
mkdir -p corpus/smi_text && ./smi_text_fuzz -max_total_time="$SECS" corpus/smi_text ../../tests/fixtures/explain/smi
mkdir -p corpus/template_rules && ./template_rules_fuzz -max_total_time="$SECS" corpus/template_rules ../../tests/fixtures/template_rules
mkdir -p corpus/job_protocol && ./job_protocol_fuzz -max_total_time="$SECS" corpus/job_protocol ../../tests/fixtures/job_protocol
mkdir -p corpus/cli && ./cli_fuzz -max_total_time="$SECS" corpus/cli ../../tests/fixtures/config
mkdir -p corpus/nccl && ./nccl_fuzz -max_total_time="$SECS" corpus/nccl ../../tests/fixtures/nccl
mkdir -p corpus/nccl_tests && ./nccl_tests_fuzz -max_total_time="$SECS" corpus/nccl_tests ../../tests/fixtures/nccltests
mkdir -p corpus/topo && ./topo_fuzz -max_total_time="$SECS" corpus/topo ../../tests/fixtures/topo
mkdir -p corpus/trace_reader && ./trace_reader_fuzz -max_total_time="$SECS" corpus/trace_reader ../../tests/fixtures/trace
mkdir -p corpus/alerts && ./alerts_fuzz -max_total_time="$SECS" corpus/alerts ../../tests/fixtures/silences
mkdir -p corpus/baseline && ./baseline_fuzz -max_total_time="$SECS" corpus/baseline ../../tests/fixtures/baselines
mkdir -p corpus/user_rules && ./user_rules_fuzz -max_total_time="$SECS" corpus/user_rules ../../tests/fixtures/user_rules
mkdir -p corpus/request_parser && ./request_parser_fuzz -max_total_time="$SECS" corpus/request_parser ../../tests/fixtures/http_requests
mkdir -p corpus/sacct && ./sacct_fuzz -max_total_time="$SECS" corpus/sacct ../../tests/fixtures/slurm/sacct
mkdir -p corpus/forwarded && ./forwarded_fuzz -max_total_time="$SECS" corpus/forwarded ../../tests/fixtures/forwarded
