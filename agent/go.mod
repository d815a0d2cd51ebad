module hutch/agent

go 1.19
