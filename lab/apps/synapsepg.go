package apps

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	_ "github.com/lib/pq" // PostgreSQL, as Synapse's psycopg2
)

// Synapse on PostgreSQL (database.name psycopg2): the stand-in connects
// as psycopg2 would with database.args (user, password, dbname or
// database, host, port), checks the database as Synapse's
// prepare_database does (its collation and ctype C, the schema markers,
// the users' server_name) and brings the markers up to its version.

// pgArgs are the connection arguments of database.args.
type pgArgs struct {
	user, password, dbname, host, port string
}

func readPgArgs(args map[string]any) pgArgs {
	s := func(k string) string {
		switch v := args[k].(type) {
		case string:
			return v
		case float64:
			return fmt.Sprint(int(v))
		}

		return ""
	}

	a := pgArgs{user: s("user"), password: s("password"), dbname: s("dbname"), host: s("host"), port: s("port")}
	if a.dbname == "" {
		a.dbname = s("database")
	}

	if a.port == "" {
		a.port = "5432"
	}

	return a
}

// openPostgres connects as psycopg2 would, the host resolved as the pod's
// DNS would resolve it.
func openPostgres(ctx context.Context, c *Container, a pgArgs) (*sql.DB, error) {
	if a.host == "" || strings.HasPrefix(a.host, "/") {
		return nil, fmt.Errorf("database.args.host %q: the lab's Synapse stand-in connects over TCP only", a.host)
	}

	addr, err := c.resolve(ctx, a.host)
	if err != nil {
		return nil, fmt.Errorf("psycopg2.OperationalError: could not translate host name %q to address: %w", a.host, err)
	}

	u := url.URL{Scheme: "postgres", User: url.UserPassword(a.user, a.password), Host: net.JoinHostPort(addr, a.port), Path: "/" + a.dbname,
		RawQuery: "sslmode=disable&connect_timeout=10"}

	db, err := sql.Open("postgres", u.String())
	if err != nil {
		return nil, err
	}

	pingCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()

	if err := db.PingContext(pingCtx); err != nil {
		db.Close() //nolint:errcheck

		return nil, fmt.Errorf("psycopg2.OperationalError: connection to server at %q (%s), port %s failed: %w", a.host, addr, a.port, err)
	}

	return db, nil
}

// preparePostgres is prepareDatabase for psycopg2.
func preparePostgres(ctx context.Context, c *Container, args map[string]any, serverName string, schema, compat int) error {
	a := readPgArgs(args)
	c.logf("synapse.storage.databases - [master]: Checking database server (psycopg2: %s on %s)", a.dbname, a.host)

	db, err := openPostgres(ctx, c, a)
	if err != nil {
		return err
	}
	defer db.Close()

	var collate, ctype string
	if err := db.QueryRowContext(ctx, "SELECT datcollate, datctype FROM pg_database WHERE datname = current_database()").Scan(&collate, &ctype); err != nil {
		return err
	}

	if allow, _ := args["allow_unsafe_locale"].(bool); !allow && (collate != "C" || ctype != "C") {
		return fmt.Errorf("Database has incorrect collation of %q. Should be 'C'", collate) //nolint:staticcheck // Synapse's words
	}

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck

	if err := checkPgSchema(ctx, tx, serverName, schema); err != nil {
		return err
	}

	if err := upgradePgSchema(ctx, tx, schema, compat); err != nil {
		return err
	}

	return tx.Commit()
}

// checkPgSchema refuses a schema newer than the stand-in's and users of
// another server_name, as prepare_database does.
func checkPgSchema(ctx context.Context, tx *sql.Tx, serverName string, schema int) error {
	for _, q := range []string{
		"CREATE TABLE IF NOT EXISTS schema_version(Lock CHAR(1) NOT NULL DEFAULT 'X' UNIQUE, version INTEGER NOT NULL, upgraded BOOL NOT NULL, CHECK (Lock='X'))",
		"CREATE TABLE IF NOT EXISTS schema_compat_version(Lock CHAR(1) NOT NULL DEFAULT 'X' UNIQUE, compat_version INTEGER NOT NULL, CHECK (Lock='X'))",
	} {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return err
		}
	}

	var cv int
	switch err := tx.QueryRowContext(ctx, "SELECT compat_version FROM schema_compat_version").Scan(&cv); {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return err
	case cv > schema:
		return fmt.Errorf("Cannot use this database as it is too new for the server to understand (its schema_compat_version is %d, this Synapse's SCHEMA_VERSION %d)", cv, schema) //nolint:staticcheck // Synapse's words
	}

	var hasUsers bool
	if err := tx.QueryRowContext(ctx, "SELECT to_regclass('users') IS NOT NULL").Scan(&hasUsers); err != nil || !hasUsers {
		return err
	}

	var user string
	switch err := tx.QueryRowContext(ctx, "SELECT name FROM users LIMIT 1").Scan(&user); {
	case errors.Is(err, sql.ErrNoRows):
		return nil
	case err != nil:
		return err
	}

	if _, domain, _ := strings.Cut(user, ":"); domain != serverName {
		return fmt.Errorf("Found users in database not native to %s!\nYou cannot change a synapse server_name after it's been configured", serverName)
	}

	return nil
}

func upgradePgSchema(ctx context.Context, tx *sql.Tx, schema, compat int) error {
	for _, q := range []string{
		"DELETE FROM schema_compat_version WHERE compat_version < $1",
		"INSERT INTO schema_compat_version(compat_version) SELECT $1 WHERE NOT EXISTS (SELECT 1 FROM schema_compat_version)",
	} {
		if _, err := tx.ExecContext(ctx, q, compat); err != nil {
			return err
		}
	}

	for _, q := range []string{
		"UPDATE schema_version SET version = $1, upgraded = true WHERE version < $1",
		"INSERT INTO schema_version(version, upgraded) SELECT $1, false WHERE NOT EXISTS (SELECT 1 FROM schema_version)",
	} {
		if _, err := tx.ExecContext(ctx, q, schema); err != nil {
			return err
		}
	}

	return nil
}
