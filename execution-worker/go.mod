module github.com/mangohq/mango/execution-worker

go 1.26

replace github.com/mangohq/mango/proto => ../proto
