module github.com/mangohq/mango/deploy

go 1.26.0
