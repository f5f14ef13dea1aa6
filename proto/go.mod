module github.com/mangohq/mango/proto

go 1.26
