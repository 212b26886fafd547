package main

import (
	"github.com/homelab-migrate/migrate/providers/plugin"
	"runtime"

	"github.com/spf13/cobra"
)

func (a *app) versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of migrate, of Go, and which provider programs it runs (path, sha256, verified)",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			a.view().Version(version, runtime.Version(), runtime.GOOS+"/"+runtime.GOARCH)
			for _, p := range pluginPrograms {
				found, err := plugin.Check(p)
				a.view().ProviderProgram(p.Name, found, err)
			}
			return nil
		},
	}
}
