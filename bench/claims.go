package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"keel/internal/clock"
	"keel/internal/scheduler"
	"keel/internal/store"
	"keel/internal/store/postgres"
	"keel/internal/store/postgres/pgtest"
	"keel/internal/store/sqlite"
)

// claimRun is one decide+claim measurement.
type claimRun struct {
	perSec   float64
	p50, p99 float64 // ms
	conflict int
}

// decideAndClaim seeds hosts into st, builds a scheduler on it and times n
// decisions, each claimed in st (one at a time, as one scheduler makes
// them).
func decideAndClaim(ctx context.Context, st store.Store, warm, n int, prefix string) (claimRun, error) {
	cfg := scheduler.DefaultConfig()
	cfg.HostSubsetSize = 3
	s, err := newScheduler(ctx, st, cfg, clock.NewVirtual(clock.Epoch))
	if err != nil {
		return claimRun{}, err
	}
	lat, conflicts, err := decisions(ctx, s, st, smallFlavor, warm, n, prefix)
	if err != nil {
		return claimRun{}, err
	}
	var sum time.Duration
	for _, l := range lat {
		sum += l
	}
	return claimRun{perSec: float64(len(lat)) / sum.Seconds(), p50: ms(percentile(lat, 50)), p99: ms(percentile(lat, 99)), conflict: conflicts}, nil
}

// claims measures decide + durable claim at 10,000 hosts on SQLite (the
// default synchronous=NORMAL and FULL) and on PostgreSQL.
func (r *run) claims(ctx context.Context) error {
	hosts := r.size(10000, 100)
	n := r.size(3000, 30)
	hs := synthHosts(hosts, 32, 131072, 2000, 3)
	clk := clock.NewVirtual(clock.Epoch)
	cond := fmt.Sprintf("%s decisions after %d warm-up, one at a time: refresh the view from the store's change stream, filter and weigh %s hosts, claim m1.small in the store naming the provider generation", commas(int64(n)), r.size(50, 5), commas(int64(hosts)))

	dir, err := os.MkdirTemp("", "keelbench-sqlite-")
	if err != nil {
		return fmt.Errorf("temp dir: %w", err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "keel.db")
	for i, sync := range []string{"NORMAL", "FULL"} {
		st, err := sqlite.OpenWith(ctx, path, sqlite.Options{Synchronous: sync})
		if err != nil {
			return fmt.Errorf("opening SQLite: %w", err)
		}
		if i == 0 {
			r.progress("claims: seeding %d hosts in SQLite", hosts)
			if err := seed(ctx, st, hs, clk.Now()); err != nil {
				st.Close()
				return err
			}
		}
		res, err := decideAndClaim(ctx, st, r.size(50, 5), n, "sqlite-"+sync)
		st.Close()
		if err != nil {
			return fmt.Errorf("SQLite %s: %w", sync, err)
		}
		text := fmt.Sprintf("%s (p50 %s, p99 %s)", fmtRate(res.perSec, "claims/s"), fmtMS(res.p50), fmtMS(res.p99))
		if sync == "NORMAL" {
			r.figure("claims_per_s_sqlite_10k", res.perSec)
			r.figure("claim_p99_ms_sqlite_10k", res.p99)
			text += "; " + r.goal("claims_per_s_sqlite_10k", res.perSec >= 2000, "≥ 2,000/s")
			r.row("2", fmt.Sprintf("decide + durable claim, %s hosts, SQLite", commas(int64(hosts))), text,
				cond+"; SQLite WAL, synchronous=NORMAL (keel's default: a commit survives a crash of the process), file on local disk")
		} else {
			r.figure("claims_per_s_sqlite_full_10k", res.perSec)
			r.row("2", fmt.Sprintf("decide + durable claim, %s hosts, SQLite FULL", commas(int64(hosts))), text,
				"the same, synchronous=FULL (an fsync per commit: also survives power loss)")
		}
		r.progress("claims on SQLite %s: %.0f/s", sync, res.perSec)
	}

	r.progress("claims: starting a throw-away PostgreSQL cluster")
	cluster, err := pgtest.Start(ctx)
	if err != nil {
		return fmt.Errorf("PostgreSQL: %w", err)
	}
	defer cluster.Stop()
	db, err := cluster.CreateDatabase(ctx, "")
	if err != nil {
		return fmt.Errorf("PostgreSQL: %w", err)
	}
	// pgtest's cluster runs with fsync and synchronous_commit off (it is
	// for tests); this connection asks for synchronous_commit=on, so a
	// claim returns only once its commit record is written out by the
	// server — what survives a crash of the server process.
	url := cluster.URL(db) + "&synchronous_commit=on"
	st, err := postgres.Open(ctx, url)
	if err != nil {
		return fmt.Errorf("opening PostgreSQL store: %w", err)
	}
	defer st.Close()
	r.progress("claims: seeding %d hosts in PostgreSQL", hosts)
	if err := seed(ctx, st, hs, clk.Now()); err != nil {
		return err
	}
	res, err := decideAndClaim(ctx, st, r.size(50, 5), n, "pg")
	if err != nil {
		return fmt.Errorf("PostgreSQL: %w", err)
	}
	r.figure("claims_per_s_postgres_10k", res.perSec)
	r.figure("claim_p99_ms_postgres_10k", res.p99)
	r.row("2", fmt.Sprintf("decide + durable claim, %s hosts, PostgreSQL", commas(int64(hosts))),
		fmt.Sprintf("%s (p50 %s, p99 %s)", fmtRate(res.perSec, "claims/s"), fmtMS(res.p50), fmtMS(res.p99)),
		cond+"; "+pgVersion(cluster)+" throw-away cluster on a unix socket, synchronous_commit=on, fsync=off (the test cluster's setting)")
	r.progress("claims on PostgreSQL: %.0f/s", res.perSec)
	return nil
}

// pgVersion names the server binaries the cluster runs.
func pgVersion(*pgtest.Cluster) string {
	if d, err := pgtest.FindBinDir(); err == nil {
		return "PostgreSQL " + filepath.Base(filepath.Dir(d))
	}
	return "PostgreSQL"
}
