UPDATE bench_ceiling SET v = v + 1 WHERE id = $1
