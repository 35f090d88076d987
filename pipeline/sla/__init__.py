"""SLA figures: the job's pure logic, its history, worker ticks, the live dashboard."""
