// deploy/README's three-node recipe with real processes: nats-server
// built from the module go.mod requires, run with deploy/nats-cluster's
// files, and agentbus replicas run with deploy/agentbus-cluster.yaml, all
// started at once on a fresh cluster.

package cluster_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbus/agentbus/test/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

var addrRE = regexp.MustCompile(`127\.0\.0\.1:[0-9]+`)

// readyWithin bounds how long a replica of a cluster started at once may
// take to answer /readyz 200.
const readyWithin = 30 * time.Second

// TestReplicasStartTogether: three nats-server processes and three
// agentbus replicas started at the same moment on a fresh cluster, as
// deploy/README.md's recipe does. No replica exits while the cluster
// elects its leaders or while the others create the same streams: each
// waits and tries again, answers /readyz 200 within 30 s, and a command
// submitted through one replica shows its event through another. The
// files are deploy's own, each port moved to a free one and each store
// to the test's directory. Rounds: AGENTBUS_STARTUP_ROUNDS, default 5 (1
// with -short).
func TestReplicasStartTogether(t *testing.T) {
	rounds := 5
	if testing.Short() {
		rounds = 1
	}
	if v := os.Getenv("AGENTBUS_STARTUP_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("AGENTBUS_STARTUP_ROUNDS=%q: want a positive number", v)
		}
		rounds = n
	}
	natsBin, agentbusBin := testkit.BuildNATSServer(t), testkit.BuildAgentbus(t)
	for r := 1; r <= rounds; r++ {
		t.Run(fmt.Sprintf("round%d", r), func(t *testing.T) { startTogether(t, natsBin, agentbusBin) })
	}
}

// deployFile reads a file of deploy/ with every port of the recipe moved
// as ports says and each "./nats-data" under dir.
func deployFile(t *testing.T, name string, ports map[string]string, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", name))
	if err != nil {
		t.Fatal(err)
	}
	s := strings.ReplaceAll(string(b), "./nats-data", filepath.Join(dir, "nats-data"))
	return addrRE.ReplaceAllStringFunc(s, func(addr string) string {
		port, ok := ports[strings.TrimPrefix(addr, "127.0.0.1:")]
		if !ok {
			t.Fatalf("deploy/%s: %s is not a port of the recipe", name, addr)
		}
		return "127.0.0.1:" + port
	})
}

func startTogether(t *testing.T, natsBin, agentbusBin string) {
	dir := t.TempDir()
	// deploy/nats-cluster's ports: client 4231-4233, cluster 6221-6223,
	// monitoring 8221-8223; and agentbus-cluster.yaml's publicUrl, 8080.
	ports := map[string]string{"8080": strconv.Itoa(testkit.FreePort(t))}
	for n := 1; n <= 3; n++ {
		for _, base := range []int{4230, 6220, 8220} {
			ports[strconv.Itoa(base+n)] = strconv.Itoa(testkit.FreePort(t))
		}
	}
	var confs []string
	for n := 1; n <= 3; n++ {
		conf := filepath.Join(dir, fmt.Sprintf("n%d.conf", n))
		if err := os.WriteFile(conf, []byte(deployFile(t, fmt.Sprintf("nats-cluster/n%d.conf", n), ports, dir)), 0o600); err != nil {
			t.Fatal(err)
		}
		confs = append(confs, conf)
	}
	cfgFile := filepath.Join(dir, "agentbus-cluster.yaml")
	if err := os.WriteFile(cfgFile, []byte(deployFile(t, "agentbus-cluster.yaml", ports, dir)), 0o600); err != nil {
		t.Fatal(err)
	}
	type replica struct {
		api, ops string
		p        *testkit.Process
	}
	replicas := make([]*replica, 3)
	for i := range replicas {
		replicas[i] = &replica{api: testkit.FreeAddr(t), ops: testkit.FreeAddr(t)}
	}
	// Everything at once: the servers and the replicas in the same moment.
	start := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	for n, conf := range confs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := testkit.StartProcess(t, fmt.Sprintf("nats-server n%d", n+1), natsBin, "-c", conf)
			_ = p
		}()
	}
	run := func(i int, r *replica) *testkit.Process {
		return testkit.StartProcess(t, fmt.Sprintf("agentbus %d", i+1), agentbusBin, "serve", "--config", cfgFile,
			"--listen", r.api, "--ops-listen", r.ops, "--data", filepath.Join(dir, fmt.Sprintf("data%d", i+1)))
	}
	for i, r := range replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := run(i, r)
			mu.Lock()
			r.p = p
			mu.Unlock()
		}()
	}
	wg.Wait()

	client := &http.Client{Timeout: 2 * time.Second}
	for i, r := range replicas {
		restarts := 0
		for {
			if r.p.Exited() && restarts < 3 && strings.Contains(r.p.Output(), "address already in use") {
				// A port chosen free was taken before agentbus bound it (by
				// a test running beside this one): not what is tested.
				r.api, r.ops = testkit.FreeAddr(t), testkit.FreeAddr(t)
				r.p = run(i, r)
				restarts++
				continue
			}
			if r.p.Exited() {
				t.Fatalf("agentbus %d exited %s after the start: %v", i+1, time.Since(start).Round(time.Millisecond), r.p.Wait())
			}
			res, err := client.Get("http://" + r.ops + "/readyz")
			if err == nil {
				res.Body.Close()
				if res.StatusCode == http.StatusOK {
					break
				}
			}
			if time.Since(start) > readyWithin {
				t.Fatalf("agentbus %d not ready %s after the start", i+1, readyWithin)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	t.Logf("three replicas ready %s after the start", time.Since(start).Round(time.Millisecond))

	// A command through each replica, its event read through the next.
	for i := range replicas {
		in, out := "http://"+replicas[i].api, "http://"+replicas[(i+1)%len(replicas)].api
		c := newCommand(fmt.Sprintf("startup%d", i))
		body, _ := json.Marshal(c.env)
		if a := post(in, i, body); a.status != http.StatusAccepted {
			t.Fatalf("POST /commands through replica %d: %s", i+1, a)
		}
		testkit.EventuallyWithin(t, fmt.Sprintf("the event of a command sent through replica %d, read through replica %d", i+1, (i+1)%len(replicas)+1),
			30*time.Second, func() bool {
				p, _, err := getPage(out, "/events?correlationId="+c.corr)
				return err == nil && len(p.Events) == 1 && p.Events[0]["type"] == "OrderPlaced"
			})
	}
}
