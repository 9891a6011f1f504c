module github.com/sandstep/sandstep

go 1.26
