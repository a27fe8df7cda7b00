module github.com/nakcast/nakcast

go 1.26.0

require (
	github.com/stretchr/testify v1.12.1
	golang.org/x/net v0.63.0
	golang.org/x/sys v0.50.0
)

require go.yaml.in/yaml/v3 v3.0.5 // indirect
