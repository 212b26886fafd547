package main

import (
	"github.com/spf13/cobra"
)

const rootHelp = `migrate plans, runs and rolls back a migration written as an HCL runbook:
phases of steps run by providers, checkpointed after every step so that an
interrupted run resumes where it stopped.

Exit codes:
  0    success; for plan, no changes
  1    an error: an invalid runbook, a failed step, a refused or stale plan,
       a locked state, a question that could not be asked
  2    plan --detailed-exitcode only: the plan has changes
  130  run or rollback interrupted (Ctrl-C, SIGTERM); the state records where
       it stopped, and the same command resumes`

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "migrate",
		Short:         "Plan, run and roll back home-lab migrations",
		Long:          rootHelp,
		SilenceErrors: true,
		SilenceUsage:  true,
		PersistentPreRunE: func(*cobra.Command, []string) error {
			return a.setup()
		},
	}
	f := root.PersistentFlags()
	f.StringVar(&a.runbookDir, "runbook", ".", "the runbook directory `DIR` (its *.hcl files)")
	f.StringVar(&a.statePath, "state", "", "the state directory `PATH` (default DIR/.migrate)")
	f.StringVar(&a.backendURL, "backend", "", "where the state lives, overriding the runbook's backend block and $MIGRATE_BACKEND: `URL` local, local:PATH or etcd://HOST:PORT,.../PREFIX/?ca=&cert=&key=&user=&lock_ttl=&insecure= (the password in $MIGRATE_ETCD_PASSWORD)")
	f.BoolVar(&a.noColor, "no-color", false, "do not color the output")
	f.StringVar(&a.logLevel, "log-level", "warn", "log `LEVEL`: debug, info, warn or error")
	f.StringVar(&a.ageIdentity, "age-identity", "", "the age identity file `PATH` that opens encrypted files (default: $MIGRATE_AGE_IDENTITY)")
	root.AddCommand(
		a.validateCommand(),
		a.planCommand(),
		a.runCommand(),
		a.statusCommand(),
		a.reportCommand(),
		a.rollbackCommand(),
		a.graphCommand(),
		a.docsCommand(),
		a.stateCommand(),
		a.secretsCommand(),
		a.initCommand(),
		a.patchesCommand(),
		a.versionCommand(),
	)
	return root
}
