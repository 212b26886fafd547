package providers

// Program is the program a provider runs in, as a plan names it: what
// a person reviewing the plan trusts with the runbook's secrets.
type Program struct {
	// Provider is the provider's type ("talos").
	Provider string `json:"provider"`
	// Path is the file run.
	Path string `json:"path"`
	// SHA256 is the sum of the file's content, read from the file that runs.
	SHA256 string `json:"sha256"`
	// Verified: SHA256 is the sum recorded in migrate when it was built
	// (make build); false in a build without sums (go build, go run),
	// which runs only a program from a directory its user named.
	Verified bool `json:"verified"`
}

// ProgramRunner is implemented by a provider that runs as a program of
// its own. Program locates and checks that program without starting it.
type ProgramRunner interface {
	Program() (Program, error)
}
