module github.com/mangohq/mango/internal

go 1.26.0

require github.com/caarlos0/env/v11 v11.4.2
