package main

import (
	"github.com/spf13/cobra"

	"github.com/homelab-migrate/migrate/views"
)

func (a *app) graphCommand() *cobra.Command {
	vf := varFlags{optional: true} // like terraform validate: variables stay unknown
	var format string
	cmd := &cobra.Command{
		Use:   "graph",
		Short: "Print the runbook's phases, steps and dependencies as a graph",
		Long: `Print the runbook as a graph: phases as clusters (dot), subgraphs
(mermaid) or framed rows (svg), steps as nodes, checks as hexagons, an
edge from each step to the steps that wait for it, and dashed edges for the
order of phases. The svg format is a picture laid out by migrate itself;
dot needs Graphviz (dot -Tsvg) to become one.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			rb, err := a.load(vf)
			if err != nil {
				return err
			}
			return a.view().Graph(rb, format)
		},
	}
	vf.add(cmd)
	cmd.Flags().StringVar(&format, "format", views.GraphDot, "output `FORMAT`: dot, mermaid or svg")
	return cmd
}
