package samtemplate_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/sandstep/sandstep/"

// lambdaBuild is what `make -n build-<id>` says it builds: the package and
// its build tags, so that the check below sees the graph sam links.
type lambdaBuild struct {
	pkg, tags string
}

var (
	buildPkg  = regexp.MustCompile(` (\./functions/[^ ]+)\n`)
	buildTags = regexp.MustCompile(` -tags ([^ ]+) `)
)

func lambdaBuilds(t *testing.T) map[string]lambdaBuild {
	t.Helper()
	tpl := loadRepoTemplate(t)
	out := t.TempDir()
	builds := map[string]lambdaBuild{}
	for _, id := range makefileResources(tpl) {
		if tpl.Resources()[id]["Type"] != "AWS::Serverless::Function" {
			continue
		}
		b, err := makeLambda(t, "build-"+id, out, "-n")
		if err != nil {
			t.Fatalf("make -n build-%s: %v\n%s", id, err, b)
		}
		pkg, tags := buildPkg.FindSubmatch(b), buildTags.FindSubmatch(b)
		if pkg == nil || tags == nil {
			t.Fatalf("build-%s: no ./functions/ package or -tags in:\n%s", id, b)
		}
		builds[id] = lambdaBuild{pkg: string(pkg[1]), tags: string(tags[1])}
	}
	if len(builds) < 9 {
		t.Fatalf("only %d functions in template.yaml: %v", len(builds), builds)
	}
	return builds
}

// goDeps lists the packages a Lambda links and, for each, what it imports.
func goDeps(t *testing.T, b lambdaBuild) map[string][]string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "go", "list", "-deps", "-json=ImportPath,Imports", "-tags", b.tags, b.pkg)
	cmd.Dir = repoRoot(t)
	cmd.Env = append(withoutEnv("GOOS"), "GOOS=linux", "GOARCH=arm64", "CGO_ENABLED=0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", b.pkg, err, stderr.Bytes())
	}
	deps := map[string][]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		deps[p.ImportPath] = p.Imports
	}
	return deps
}

// lambdaDeadWeight are packages a Lambda ran nothing of when they were
// cut (BENCHMARKS.md, "Lambda bootstraps"), with the reason; each came
// through a dependency linking them whether or not they are used, so a new
// import can bring them back unnoticed.
var lambdaDeadWeight = map[string]string{
	"net/rpc":                "go-plugin's netrpc protocol, which sandstep does not speak",
	"encoding/gob":           "net/rpc's encoding",
	"html/template":          "net/rpc's debug page",
	"text/template":          "net/rpc's debug page, through html/template",
	"debug/elf":              "go-plugin's note on a plugin of another architecture; process.go reads the ELF header",
	"debug/macho":            "go-plugin's note on a plugin of another architecture",
	"debug/pe":               "go-plugin's note on a plugin of another architecture",
	"internal/zstd":          "compressed debug sections, through debug/elf",
	"golang.org/x/net/trace": "gRPC's debug pages (the grpcnotrace tag)",
	"google.golang.org/protobuf/reflect/protodesc":  "descriptors at run time, for gRPC reflection",
	"google.golang.org/protobuf/types/descriptorpb": "descriptor.proto, for gRPC reflection",
	"testing":                        "a test helper linked by a non-test package",
	module + "providers/plugin/mtls": "certificate generation for plugin mTLS, which no Lambda turns on",
}

// TestLambdasLinkOnlyWhatTheyRun is the structural guard of issue 12: no
// Lambda links the local emulation of AWS (the ASL interpreter, the local
// executor, the CloudFormation reader, DynamoDB Local, the local stack) or
// the test kit; only the API links the API; the phases that never open a
// sandbox link neither the plugin glue nor sessions; and no package of
// this module imports testing outside a test. The sizes these cuts buy are
// in BenchmarkLambdaBuild and BENCHMARKS.md.
func TestLambdasLinkOnlyWhatTheyRun(t *testing.T) {
	needMake(t)
	if _, err := exec.LookPath("go"); err != nil {
		need(t, "go", err)
	}
	noSandbox := []string{"DiscoverFunction", "ReportFunction"}
	for id, b := range lambdaBuilds(t) {
		deps := goDeps(t, b)
		if _, ok := deps[module+"internal/service/store"]; !ok {
			t.Fatalf("%s: go list found no store among %d packages; the check would prove nothing", id, len(deps))
		}
		var bad []string
		for pkg, imports := range deps {
			switch {
			case strings.HasPrefix(pkg, module+"internal/emulation/"):
				bad = append(bad, pkg+" (local emulation)")
			case strings.HasPrefix(pkg, module+"internal/testkit/"):
				bad = append(bad, pkg+" (test kit)")
			case pkg == module+"internal/service/api" && id != "ApiFunction":
				bad = append(bad, pkg+" (only the ApiFunction serves the API)")
			case slices.Contains(noSandbox, id) && (pkg == module+"providers/plugin" || pkg == module+"internal/service/sessions"):
				bad = append(bad, pkg+" (this phase never opens a sandbox)")
			case pkg == "gopkg.in/yaml.v3" || strings.HasPrefix(pkg, "github.com/ohler55/ojg"):
				bad = append(bad, pkg+" (template and ASL parsing belong to local emulation)")
			case strings.HasPrefix(pkg, "github.com/getkin/kin-openapi") || strings.HasPrefix(pkg, "github.com/santhosh-tekuri/jsonschema"):
				bad = append(bad, pkg+" (kin-openapi checks answers against openapi.json in tests; the API only embeds the file)")
			case strings.HasPrefix(pkg, "github.com/modelcontextprotocol/go-sdk"):
				bad = append(bad, pkg+" (the MCP SDK judges the server in tests; tools/mcp.go serves)")
			case strings.HasPrefix(pkg, "github.com/hashicorp/"):
				bad = append(bad, pkg+" (a Lambda only hosts plugins: providers/plugin/process.go speaks go-plugin's protocol; build with sandstep.noserve)")
			case lambdaDeadWeight[pkg] != "":
				bad = append(bad, pkg+" ("+lambdaDeadWeight[pkg]+")")
			case strings.HasPrefix(pkg, "google.golang.org/grpc/reflection"):
				bad = append(bad, pkg+" (gRPC reflection serves tools like grpcurl; only a plugin serves, and it is not a Lambda)")
			case strings.HasPrefix(pkg, "github.com/aws/aws-sdk-go-v2/service/secretsmanager") || strings.HasPrefix(pkg, "github.com/aws/aws-sdk-go-v2/service/ssm"):
				bad = append(bad, pkg+" (1.1 MB: the SDK clients judge the fake in tests; internal/service/secrets reads the stores)")
			}
			if slices.Contains(imports, "testing") {
				bad = append(bad, pkg+" imports testing")
			}
		}
		slices.Sort(bad)
		for _, p := range bad {
			t.Errorf("%s (%s) links %s", id, b.pkg, p)
		}
	}
}

// The functions that open the provider read its secrets at init, so they,
// and only they, get the read access template.yaml grants, and that
// access is exactly GetSecretValue and GetParameter on the ARNs the
// parameters list.
func TestSecretReadsFollowTheProvider(t *testing.T) {
	needMake(t)
	tpl := loadRepoTemplate(t)
	policy := tpl.Resources()["SecretStoreReadPolicy"]
	if policy == nil || policy["Condition"] != "ReadsSecretStores" {
		t.Fatalf("SecretStoreReadPolicy = %v, want a policy under the condition ReadsSecretStores", policy)
	}
	doc, _ := json.Marshal(policy["Properties"].(map[string]any)["PolicyDocument"])
	want := `{"Statement":[` +
		`{"Fn::If":["ReadsSecrets",{"Action":"secretsmanager:GetSecretValue","Effect":"Allow","Resource":{"Ref":"SecretReadArns"}},{"Ref":"AWS::NoValue"}]},` +
		`{"Fn::If":["ReadsParameters",{"Action":"ssm:GetParameter","Effect":"Allow","Resource":{"Ref":"ParameterReadArns"}},{"Ref":"AWS::NoValue"}]}` +
		`],"Version":"2012-10-17"}`
	if string(doc) != want {
		t.Fatalf("SecretStoreReadPolicy document:\n%s\nwant\n%s", doc, want)
	}
	attached := `{"Fn::If":["ReadsSecretStores",{"Ref":"SecretStoreReadPolicy"},{"Ref":"AWS::NoValue"}]}`
	for id, b := range lambdaBuilds(t) {
		_, opens := goDeps(t, b)[module+"internal/service/providerhost"]
		has := false
		for _, p := range tpl.Resources()[id]["Properties"].(map[string]any)["Policies"].([]any) {
			if j, _ := json.Marshal(p); string(j) == attached {
				has = true
			}
		}
		if opens != has {
			t.Errorf("%s: opens the provider %v, may read its secrets %v", id, opens, has)
		}
	}
}
