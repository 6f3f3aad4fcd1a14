"""shmkafka.perf: the side-by-side benchmark tool behind ``shmkafka perf`` (see
docs/performance.md)."""
