package main

import (
	"runtime"

	"github.com/spf13/cobra"
)

func (a *app) versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of migrate and of Go it was built with",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			a.view().Version(version, runtime.Version(), runtime.GOOS+"/"+runtime.GOARCH)
			return nil
		},
	}
}
