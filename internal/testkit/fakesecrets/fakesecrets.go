// Package fakesecrets stands in for AWS Secrets Manager and SSM Parameter
// Store, which cannot run here: one HTTP server that answers
// GetSecretValue (string and binary secrets, the AWSCURRENT and
// AWSPREVIOUS stages) and GetParameter in the JSON 1.1 protocol the AWS
// SDKs speak (X-Amz-Target, application/x-amz-json-1.1, errors as __type
// and message), for requests signed with SigV4 for the right service. Its
// own test judges it with the SDK's secretsmanager and ssm clients.
package fakesecrets

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"
)

// Region and Account are what the fake's ARNs say.
const (
	Region  = "us-east-1"
	Account = "000000000000"
)

// Server is a fake Secrets Manager and SSM. Use URL as the endpoint of
// both (AWS_ENDPOINT_URL, or AWS_ENDPOINT_URL_SECRETS_MANAGER and
// AWS_ENDPOINT_URL_SSM).
type Server struct {
	URL string
	srv *httptest.Server

	mu      sync.Mutex
	secrets map[string]secret // by name
	params  map[string]param  // by name
	calls   map[string]int    // by X-Amz-Target
	// versions numbers the secrets' versions.
	versions int
}

// secret is one secret's versions: the current one (AWSCURRENT) and the
// one before it (AWSPREVIOUS), as a rotation leaves them. A version holds
// a string or bytes.
type secret struct {
	arn               string
	current, previous *version
	created           time.Time
}

type version struct {
	id     string
	value  string
	binary []byte
}

type param struct {
	typ, value string
	modified   time.Time
}

// New starts a fake on 127.0.0.1; Close stops it.
func New() *Server {
	s := &Server{secrets: map[string]secret{}, params: map[string]param{}, calls: map[string]int{}}
	s.srv = httptest.NewServer(s)
	s.URL = s.srv.URL
	return s
}

// Close stops the server.
func (s *Server) Close() { s.srv.Close() }

// PutSecret stores a new string version of a secret and returns its ARN,
// which ends, as AWS's do, in a dash and six random characters. The
// version it replaces becomes AWSPREVIOUS.
func (s *Server) PutSecret(name, value string) string {
	return s.put(name, &version{value: value})
}

// PutSecretBinary stores a new binary version of a secret (SecretBinary),
// as PutSecret does a string one.
func (s *Server) PutSecretBinary(name string, value []byte) string {
	return s.put(name, &version{binary: value})
}

func (s *Server) put(name string, v *version) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	sec, ok := s.secrets[name]
	if !ok {
		sec = secret{arn: fmt.Sprintf("arn:aws:secretsmanager:%s:%s:secret:%s-%s", Region, Account, name, suffix(name)), created: time.Now()}
	}
	s.versions++
	v.id = fmt.Sprintf("a1b2c3d4-5678-90ab-cdef-%012d", s.versions)
	sec.previous, sec.current = sec.current, v
	s.secrets[name] = sec
	return sec.arn
}

// PutParameter stores a parameter: typ is "String", "StringList" or
// "SecureString".
func (s *Server) PutParameter(name, typ, value string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.params[name] = param{typ: typ, value: value, modified: time.Now()}
	return paramARN(name)
}

// Calls returns how many requests named target ("GetSecretValue",
// "GetParameter") the fake answered, successful or not.
func (s *Server) Calls(target string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[target]
}

func paramARN(name string) string {
	return fmt.Sprintf("arn:aws:ssm:%s:%s:parameter/%s", Region, Account, strings.TrimPrefix(name, "/"))
}

func suffix(name string) string {
	const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	b := make([]byte, 6)
	h := 0
	for _, c := range name {
		h = h*31 + int(c)
	}
	for i := range b {
		b[i] = letters[(h>>(i*5))&0x1f%len(letters)]
	}
	return string(b)
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	target := r.Header.Get("X-Amz-Target")
	service, op, _ := strings.Cut(target, ".")
	s.mu.Lock()
	s.calls[op]++
	s.mu.Unlock()
	signing := map[string]string{"secretsmanager": "secretsmanager", "AmazonSSM": "ssm"}[service]
	switch {
	case r.Method != http.MethodPost || r.URL.Path != "/":
		fail(w, http.StatusNotFound, "UnknownOperationException", "")
		return
	case signing == "":
		fail(w, http.StatusBadRequest, "UnknownOperationException", "unknown target "+target)
		return
	case !strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-amz-json-1.1"):
		fail(w, http.StatusBadRequest, "SerializationException", "content type must be application/x-amz-json-1.1")
		return
	}
	// The signature itself is not checked (the fake has no secret key),
	// but it must be SigV4 for this service and region.
	auth := r.Header.Get("Authorization")
	if !strings.HasPrefix(auth, "AWS4-HMAC-SHA256 Credential=") || !strings.Contains(auth, "/"+Region+"/"+signing+"/aws4_request") ||
		r.Header.Get("X-Amz-Date") == "" {
		fail(w, http.StatusBadRequest, "IncompleteSignatureException", "the request is not signed with SigV4 for "+signing+" in "+Region)
		return
	}
	var in map[string]any
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		fail(w, http.StatusBadRequest, "SerializationException", "the body is not JSON")
		return
	}
	switch target {
	case "secretsmanager.GetSecretValue":
		s.getSecretValue(w, in)
	case "AmazonSSM.GetParameter":
		s.getParameter(w, in)
	default:
		fail(w, http.StatusBadRequest, "UnknownOperationException", "the fake does not implement "+target)
	}
}

func (s *Server) getSecretValue(w http.ResponseWriter, in map[string]any) {
	id, _ := in["SecretId"].(string)
	if id == "" {
		fail(w, http.StatusBadRequest, "InvalidParameterException", "SecretId is required.")
		return
	}
	s.mu.Lock()
	sec, ok := s.secrets[id]
	if !ok {
		// By ARN: the full one, or without the random suffix.
		for _, c := range s.secrets {
			if c.arn == id || (strings.HasPrefix(id, "arn:") && strings.HasPrefix(c.arn, id+"-") && len(c.arn) == len(id)+7) {
				sec, ok = c, true
			}
		}
	}
	s.mu.Unlock()
	if !ok {
		fail(w, http.StatusBadRequest, "ResourceNotFoundException", "Secrets Manager can't find the specified secret.")
		return
	}
	stage, _ := in["VersionStage"].(string)
	if stage == "" {
		stage = "AWSCURRENT"
	}
	v := map[string]*version{"AWSCURRENT": sec.current, "AWSPREVIOUS": sec.previous}[stage]
	if v == nil {
		fail(w, http.StatusBadRequest, "ResourceNotFoundException", "Secrets Manager can't find the specified secret value for staging label: "+stage)
		return
	}
	name := sec.arn[strings.Index(sec.arn, ":secret:")+len(":secret:") : len(sec.arn)-7]
	out := map[string]any{
		"ARN": sec.arn, "Name": name, "VersionId": v.id, "VersionStages": []string{stage},
		"CreatedDate": float64(sec.created.UnixMilli()) / 1000,
	}
	// Exactly one of the two, as the service answers; bytes are base64.
	if v.binary != nil {
		out["SecretBinary"] = base64.StdEncoding.EncodeToString(v.binary)
	} else {
		out["SecretString"] = v.value
	}
	answer(w, out)
}

func (s *Server) getParameter(w http.ResponseWriter, in map[string]any) {
	name, _ := in["Name"].(string)
	decrypt, _ := in["WithDecryption"].(bool)
	if arn, ok := strings.CutPrefix(name, fmt.Sprintf("arn:aws:ssm:%s:%s:parameter", Region, Account)); ok {
		name = arn
		if _, ok := s.params[name]; !ok {
			name = strings.TrimPrefix(name, "/")
		}
	}
	s.mu.Lock()
	p, ok := s.params[name]
	s.mu.Unlock()
	if !ok {
		fail(w, http.StatusBadRequest, "ParameterNotFound", "")
		return
	}
	value := p.value
	if p.typ == "SecureString" && !decrypt {
		// What SSM answers without decryption: the ciphertext.
		value = base64.StdEncoding.EncodeToString([]byte("kms-ciphertext:" + name))
	}
	answer(w, map[string]any{"Parameter": map[string]any{
		"ARN": paramARN(name), "DataType": "text", "Name": name, "Type": p.typ, "Value": value, "Version": 1,
		"LastModifiedDate": float64(p.modified.UnixMilli()) / 1000,
	}})
}

func answer(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	_ = json.NewEncoder(w).Encode(v)
}

func fail(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	w.Header().Set("X-Amzn-ErrorType", code)
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"__type": code, "message": msg})
}
