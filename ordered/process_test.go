package ordered_test

// workerProcessEnv, when set, makes the test binary run workerProcessMain instead of the tests.
const workerProcessEnv = "ORDERED_TEST_WORKER_PROCESS"

// workerProcessMain runs a worker in this process; process tests start it, kill it, stop it.
func workerProcessMain() int { return 2 }
