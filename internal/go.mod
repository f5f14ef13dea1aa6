module github.com/mangohq/mango/internal

go 1.26.0
