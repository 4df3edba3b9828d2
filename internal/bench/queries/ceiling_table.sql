CREATE TABLE bench_ceiling (id int PRIMARY KEY, v int NOT NULL);
INSERT INTO bench_ceiling SELECT g, 0 FROM generate_series(1, 100000) AS g
