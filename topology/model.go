package topology

import (
	"time"

	"github.com/kandle/kandle/candle"
	"gopkg.in/yaml.v3"
)

// The structs in this file are the topology's schema. Their tags are the one
// list of fields: `yaml` names the key, `default` fills it when absent, `doc`
// documents it, `required:"true"` makes it mandatory and `enum` lists the
// allowed values. Parsing, defaults, `kandle validate` and docs/reference.md
// are all driven by these tags (see package spec); never list fields elsewhere.

// Topology is one parsed topology file.
type Topology struct {
	Name       string                `yaml:"name" required:"true" doc:"Name of the topology; prefixes consumer groups, transactional ids and changelog topics."`
	Brokers    Brokers               `yaml:"brokers" required:"true" doc:"Kafka seed brokers (a list of host:port), or \"embedded\" to start an in-process dev broker inside kandle run (never implied: a topology without brokers is refused)."`
	Kafka      KafkaClient           `yaml:"kafka" doc:"How kandle connects to the brokers: TLS and SASL for secured clusters (Confluent Cloud, MSK, Redpanda Cloud). Absent: plaintext without authentication."`
	Group      string                `yaml:"group" doc:"Consumer group prefix. Default: kandle-<name>."`
	DeadLetter Output                `yaml:"dead_letter" doc:"Topic that receives rejected records with their reason, partition and offset."`
	Metrics    string                `yaml:"metrics" default:"127.0.0.1:9464" doc:"Bind address (host:port) of the HTTP server for /metrics, /healthz and /readyz; 127.0.0.1 keeps it on this machine, 0.0.0.0 (or :port) opens it to the network (containers). Empty disables it."`
	Commit     time.Duration         `yaml:"commit_interval" default:"25ms" doc:"How often each stage commits its transaction (outputs + offsets + state). It bounds the trade-to-final-candle latency from below (p99 ≈ 30 ms at 25ms); higher means fewer transactions."`
	Sources    map[string]*Source    `yaml:"sources" required:"true" doc:"Input streams by name."`
	Processors map[string]*Processor `yaml:"processors" required:"true" doc:"Candle and rollup processors by name."`
	Sinks      map[string]*Sink      `yaml:"sinks" doc:"Where candles (or raw trades) are written outside Kafka, by name."`
	Serve      Serve                 `yaml:"serve" doc:"The read side run by kandle serve: candle API, WebSocket stream and chart page over the stores the sinks write."`

	// File is the path the topology was read from (for messages).
	File string `yaml:"-"`

	root  *yaml.Node // the parsed document, for positions
	order order      // names in file order
	reg   Registry   // the kinds it was parsed with (KindOf)
}

// order keeps the file order of the named maps (Go maps have none).
type order struct{ sources, processors, sinks []string }

// Brokers is a list of seed brokers, or the single word "embedded".
type Brokers []string

// Embedded reports whether the topology asks for the in-process dev broker
// (only the explicit word "embedded" does; validation refuses no brokers).
func (b Brokers) Embedded() bool { return len(b) == 1 && b[0] == "embedded" }

// KafkaClient says how every Kafka client kandle creates reaches the
// brokers. The zero value is plaintext without authentication (local
// brokers, the dev broker). See connectors/kafka.ClientOpts.
type KafkaClient struct {
	TLS  KafkaTLS  `yaml:"tls" doc:"Encrypt connections with TLS (listeners with security.protocol SSL or SASL_SSL)."`
	SASL KafkaSASL `yaml:"sasl" doc:"Authenticate with SASL (listeners with security.protocol SASL_SSL or SASL_PLAINTEXT)."`

	file string     // the topology file, for positioned startup errors
	node *yaml.Node // the kafka mapping; nil when absent
}

// KafkaTLS configures TLS to the brokers.
type KafkaTLS struct {
	Enabled            bool   `yaml:"enabled" default:"false" doc:"Connect with TLS. Broker certificates are verified against the system roots plus ca_file."`
	CAFile             string `yaml:"ca_file" doc:"PEM file of CA certificates to trust besides the system roots (a private CA, a self-signed broker). Relative paths start at the working directory."`
	CertFile           string `yaml:"cert_file" doc:"PEM client certificate for mutual TLS; needs key_file."`
	KeyFile            string `yaml:"key_file" doc:"PEM private key of cert_file; needs cert_file."`
	ServerName         string `yaml:"server_name" doc:"Name the broker certificates must carry. Default: the host of each broker address (set it when connecting by IP or through a tunnel)."`
	InsecureSkipVerify bool   `yaml:"insecure_skip_verify" default:"false" doc:"Accept any broker certificate. Tests only: anyone on the network path can then read and change the traffic, passwords included."`
}

// KafkaSASL configures SASL authentication. The password is never in the
// file: PasswordEnv names the environment variable that holds it.
type KafkaSASL struct {
	Mechanism      string `yaml:"mechanism" enum:"plain|scram-sha-256|scram-sha-512|aws-msk-iam" doc:"SASL mechanism. plain sends the password itself, so pair it with tls. aws-msk-iam signs with the AWS default credential chain (AWS_* variables, AWS_PROFILE, web identity, ECS or EC2 role) and needs tls. Absent: no SASL."`
	Username       string `yaml:"username" doc:"User name (plain, scram-*); the API key on Confluent Cloud."`
	AllowPlaintext bool   `yaml:"allow_plaintext" default:"false" doc:"Let plain or scram-* run without kafka.tls, so the password (plain) or the session (scram) crosses the network unencrypted. Refused unless set: only for a trusted private network or a local test broker."`
	PasswordEnv    string `yaml:"password_env" doc:"Name of the environment variable holding the password (plain, scram-*), e.g. KAFKA_PASSWORD; the API secret on Confluent Cloud. kandle stops at startup when it is unset or empty."`
	PasswordFile   string `yaml:"password_file" doc:"File holding the password instead of password_env (a mounted Kubernetes or Docker secret; one trailing newline is ignored). Relative paths start at the working directory."`
}

// Source is an input stream of JSON records.
type Source struct {
	Kind           string   `yaml:"kind" default:"kafka" enum:"kafka|kinesis" doc:"Where records come from."`
	Topic          string   `yaml:"topic" doc:"Kafka topic (kind kafka)."`
	Partitions     int      `yaml:"partitions" default:"3" doc:"Partitions to create the topic with when it does not exist (kind kafka)."`
	Fields         Fields   `yaml:"fields" doc:"Which JSON fields hold the key, event time, price, quantity and id."`
	Symbols        []string `yaml:"symbols" doc:"Optional whitelist of keys; others are rejected with reason unknown_key."`
	MaxRecordBytes int      `yaml:"max_record_bytes" default:"65536" doc:"Records larger than this are rejected with reason oversized."`
	KeyCheck       bool     `yaml:"key_check" default:"true" doc:"Reject (reason key_mismatch) a record whose record key (Kafka) or partition key (Kinesis) is not its key field's value, or that has no key: a key spread over two partitions would get two final candles per window. Turn off only for a producer that routes keys to partitions some other way."`
	Kinesis        Kinesis  `yaml:"kinesis" doc:"Kinesis stream settings (kind kinesis)."`
}

// IsKinesis reports whether s reads a Kinesis stream (kind kinesis, named
// by Kinesis.Stream); otherwise it reads the Kafka topic Topic.
func (s *Source) IsKinesis() bool { return s.Kind == "kinesis" }

// Fields maps record fields to trade fields. Field names may be dotted
// paths into nested objects ("data.p").
type Fields struct {
	Key        string   `yaml:"key" default:"symbol" doc:"Field holding the key (symbol or device id)."`
	Time       string   `yaml:"time" default:"ts" doc:"Field holding the event time: epoch milliseconds or an RFC 3339 string."`
	Price      string   `yaml:"price" default:"price" doc:"Field holding the price (or reading value): a JSON number or numeric string."`
	Qty        string   `yaml:"qty" default:"qty" doc:"Field holding the quantity. Empty: every record weighs 1 (device readings)."`
	ID         string   `yaml:"id" default:"trade_id" doc:"Field holding the trade id used for dedupe, and reported as each candle's first_trade_id and last_trade_id (the ids of its open and close trades). Empty: no ids."`
	Side       string   `yaml:"side" doc:"Field holding the aggressor (taker) side: \"buy\" (the taker bought) or \"sell\" (the taker sold), in any ASCII letter case, nothing else (no spaces, no abbreviations). With it every candle carries taker_buy_base_volume and taker_buy_quote_volume (exact sums over the trades whose taker bought; zero for gap candles). A record without the field is rejected missing_field, one with any other value invalid_side. Empty: no side, no taker volumes. Set at most one of side and buyer_maker."`
	BuyerMaker string   `yaml:"buyer_maker" doc:"Field holding the JSON boolean \"the buyer was the maker\" (as Binance's m): true means the taker sold, false that the taker bought. Gives the same taker volumes as side. A record without the field is rejected missing_field, one whose value is not the JSON true or false (a string \"true\", a number) invalid_side. Empty: not used."`
	Action     string   `yaml:"action" doc:"Field saying what a record does to the trade its id names: \"trade\" or \"new\" (a new trade, as when the field is absent or null), \"cancel\", \"break\" or \"bust\" (the trade never happened: it leaves its window), \"correct\" or \"correction\" (the trade had this record's price and qty), in any ASCII letter case and nothing else; any other value is rejected invalid_action. A cancel or correction names the trade it takes back by that trade's id (in the id field; without one it is rejected missing_field); its time may be the trade's or the cancel's (the trade is looked for in every window of the key inside the horizon). A cancel needs only the key, time and id (its price, qty and side are not read); a correction is checked as a trade. Needs id, and revise_within on the candles processors reading the source (windows inside the horizon keep their trades). Empty: every record is a trade."`
	Values     []string `yaml:"values" doc:"Multi-metric readings: fields each holding one metric (e.g. [temperature, humidity, battery]). Each metric becomes its own series keyed <key>#<metric> with its own candles and rollups; price is then unused. A metric missing from a reading is skipped for that metric only; a non-numeric one is dead-lettered (invalid_price, the metric named)."`
}

// Kinesis configures a Kinesis stream source or sink.
type Kinesis struct {
	Stream         string        `yaml:"stream" doc:"Stream name."`
	Region         string        `yaml:"region" default:"us-east-1" doc:"AWS region."`
	Endpoint       string        `yaml:"endpoint" doc:"Custom endpoint URL (emulators); empty uses AWS."`
	LeaseTable     string        `yaml:"lease_table" doc:"DynamoDB table holding shard leases and checkpoints, one item per (processor, shard), so every candles processor reading the stream reads every shard. Default: kandle-<name>-leases."`
	DynamoDB       string        `yaml:"dynamodb_endpoint" doc:"Custom DynamoDB endpoint for the lease table; empty uses AWS."`
	LeaseTTL       time.Duration `yaml:"lease_duration" default:"10s" doc:"A lease not renewed for this long may be taken by another instance."`
	Poll           time.Duration `yaml:"poll_interval" default:"200ms" doc:"Pause between GetRecords calls on a shard that returned nothing."`
	EnhancedFanOut string        `yaml:"enhanced_fan_out" doc:"Stream consumer name for enhanced fan-out: registered if missing (shared by all instances) and read with SubscribeToShard, a dedicated 2 MB/s per shard at extra AWS cost. With several candles processors on the stream each registers <name>.<processor>. Empty: poll GetRecords."`
}

// Processor turns trades into candles (kind candles) or candles of a lower
// timeframe into a higher one (kind rollup).
type Processor struct {
	Kind        string         `yaml:"kind" required:"true" enum:"candles|rollup|silence" doc:"candles: aggregate trades from a source; rollup: combine closed candles of another processor; silence: emit events when a device (the source's key) sends nothing for the levels' delays."`
	From        string         `yaml:"from" required:"true" doc:"A source name (kinds candles and silence) or a processor name (kind rollup)."`
	Timeframe   string         `yaml:"timeframe" doc:"Window length: Ns, Nm, Nh, Nd (epoch aligned), 1w (Monday) or 1M (calendar month). Required for kinds candles and rollup."`
	Zone        string         `yaml:"zone" default:"UTC" doc:"IANA zone for day, week and month boundaries (e.g. Asia/Seoul)."`
	Lateness    time.Duration  `yaml:"lateness" default:"2s" doc:"Watermark = max event time seen - lateness. Trades for windows closed by the watermark are late. Changing it keeps the state: the stored watermark never goes back, so a longer lateness takes effect as event time moves on."`
	IdleTimeout time.Duration  `yaml:"idle_timeout" default:"5s" doc:"Live mode: a partition quiet this long advances its watermark with the wall clock. 0 disables."`
	MaxFuture   time.Duration  `yaml:"max_future" default:"1s" doc:"Records stamped further than this ahead of the clock are rejected (reason future). At most lateness: a record max_future ahead moves the watermark to at most the clock + max_future - lateness, so trades less than lateness - max_future behind the clock are never late. 0 disables."`
	MaxIdle     time.Duration  `yaml:"max_idle" default:"24h" doc:"A key gets gap candles only for windows opening less than this (event time) after its last trade; then its state is freed, and a later trade starts a new run without filling the silence. 0 fills forever. Changing it keeps the state and decides from then on."`
	Dedupe      bool           `yaml:"dedupe" default:"true" doc:"Ignore trades whose id was already counted for the key."`
	GapFill     bool           `yaml:"gap_fill" default:"true" doc:"Emit flat gap candles for windows without trades."`
	Fuse        bool           `yaml:"fuse" default:"true" doc:"Kind rollup: run in the same exactly-once unit and transaction as the processor it reads, taking its candles from memory instead of from its output topic (which still gets them), when both read the same key with the same partition count (a Kafka source with key_check, or a rollup of one). false: a stage of its own reading the topic. Switch it with every instance stopped (see kandle plan)."`
	Output      Output         `yaml:"output" doc:"Topic the closed candles (kind silence: the events) are written to. Default: <topology>.<processor>."`
	Levels      []SilenceLevel `yaml:"levels" doc:"Kind silence: the levels of a device's silence, each fired once per silence (at least one)."`
	Carry       []string       `yaml:"carry" doc:"Kind silence: fields of a device's latest reading copied into its events (e.g. owner), named by their last path element."`
	RetireField string         `yaml:"retire_field" default:"retired" doc:"Kind silence: a reading whose field of this name is true retires the device: its timers and state are deleted, no event is emitted. Empty: devices are never retired."`
	// ReviseWithin is the revision horizon (kind candles; its rollups
	// inherit it, see Topology.ReviseWithin). 0: off.
	ReviseWithin time.Duration `yaml:"revise_within" default:"0s" doc:"Kind candles: the revision horizon. A trade late for its window (the watermark passed it) whose window closed less than this before the watermark updates that window, and the candle is emitted again with rev one higher (the first final has rev 0; consumers keep the highest rev of each window); cancels and corrections of trades inside it do the same. Older trades are dead-lettered late as without it. The trades of every window inside the horizon are kept in state. Every rollup built from the processor inherits it and revises its windows from the revised candles. At most 24h. 0: off (no revisions, no kept windows)."`

	loc *time.Location   // resolved Zone, set by Parse
	tf  candle.Timeframe // parsed Timeframe with loc, set by Parse
}

// SilenceLevel is one level of a silence processor.
type SilenceLevel struct {
	Name   string        `yaml:"name" required:"true" doc:"Stable id of the level, the event name (e.g. unreachable, alert1). Keep names when editing delays: fired levels are remembered by name order."`
	After  time.Duration `yaml:"after" required:"true" doc:"Silence length that fires the level, measured from the ingestion of the device's last reading (e.g. 3d, 36h)."`
	Action string        `yaml:"action" default:"alert" doc:"What the event asks its consumer to do, carried in the event (e.g. status, alert)."`
}

// Output is a topic kandle writes (created if missing).
type Output struct {
	Topic      string `yaml:"topic" doc:"Topic name."`
	Partitions int    `yaml:"partitions" default:"3" doc:"Partitions to create the topic with when it does not exist."`
}

// Sink writes the records of processors (candles) or a source (raw trades)
// to an external store. Kind selects the connector; Config holds the
// connector's own fields, decoded by its spec.
type Sink struct {
	Kind string   `yaml:"kind" required:"true" doc:"Connector: dynamodb, s3parquet, valkey or kinesis."`
	From []string `yaml:"from" required:"true" doc:"Processors whose candles (or one source whose trades) the sink receives."`

	// Config is the connector config struct, filled by the spec of Kind.
	Config any `yaml:"-"`
	// Node is the sink's YAML (for connector-level messages).
	Node *yaml.Node `yaml:"-"`
}

// Serve configures kandle serve, the read side: which sinks' stores answer
// which part of a candle request, and the HTTP server's limits. Any number
// of serve processes may run behind a load balancer; they share nothing.
type Serve struct {
	Listen           string        `yaml:"listen" default:"127.0.0.1:8080" doc:"host:port the HTTP server listens on (API, WebSocket stream, chart page)."`
	Hot              string        `yaml:"hot" doc:"Name of a dynamodb sink: recent closed candles, read with a Query on the candle key. Empty: no hot store."`
	HotHorizon       time.Duration `yaml:"hot_horizon" default:"0s" doc:"How far back the hot store holds candles (its TTL). Older parts of a range are read from cold. 0: the hot store keeps everything (cold is read only when there is no hot store)."`
	Cold             string        `yaml:"cold" doc:"Name of an s3parquet sink: all closed candles, read with ranged GETs of only the needed objects, row groups and columns. Empty: no cold store."`
	Live             string        `yaml:"live" doc:"Name of a valkey sink: the open candle (active hash) for the newest window and pub/sub for the WebSocket stream. Empty: no open window and no stream."`
	DefaultLimit     int           `yaml:"default_limit" default:"500" doc:"Candles per page when a request gives no limit."`
	MaxLimit         int           `yaml:"max_limit" default:"1000" doc:"Largest limit a request may ask for; larger ones are refused with 400."`
	MaxRangeWindows  int64         `yaml:"max_range_windows" default:"1000000" doc:"Largest start..end span of one request, counted in windows of the timeframe; larger ones are refused with 400 (page with the cursor instead)."`
	AuthTokenEnv     string        `yaml:"auth_token_env" doc:"Name of the environment variable holding a bearer token; when set, every /v1 and /udf request and the stream need Authorization: Bearer <token> (or ?token= on the WebSocket). The chart page itself stays public. Empty: no auth."`
	CORSOrigins      []string      `yaml:"cors_origins" doc:"Origins allowed to call the API from a browser and to open the stream (e.g. https://charts.example.com), or \"*\". Empty: same origin only."`
	ReadTimeout      time.Duration `yaml:"read_timeout" default:"10s" doc:"Limit for reading one request, headers included."`
	WriteTimeout     time.Duration `yaml:"write_timeout" default:"30s" doc:"Limit for writing one API response (store reads included). WebSocket writes use write_wait."`
	IdleTimeout      time.Duration `yaml:"idle_timeout" default:"120s" doc:"How long an idle keep-alive connection stays open."`
	StoreTimeout     time.Duration `yaml:"store_timeout" default:"10s" doc:"Limit for the store reads of one API request; a slower store answers 504."`
	MaxSubscriptions int           `yaml:"max_subscriptions" default:"64" doc:"Most (symbol, timeframe) pairs one WebSocket connection may subscribe to."`
	ClientQueue      int           `yaml:"client_queue" default:"256" doc:"Updates queued per WebSocket client (after coalescing updates of the same candle); a client whose queue overflows is disconnected with reason \"slow consumer\"."`
	WriteWait        time.Duration `yaml:"write_wait" default:"10s" doc:"Limit for writing one WebSocket message; a client slower than this is disconnected."`
	PingInterval     time.Duration `yaml:"ping_interval" default:"20s" doc:"How often the server pings each WebSocket client; a client that does not answer within ping_interval is disconnected."`
	MaxMessageBytes  int64         `yaml:"max_message_bytes" default:"4096" doc:"Largest message a WebSocket client may send; larger ones close the connection with status 1009."`
	Devices          ServeDevices  `yaml:"devices" doc:"The device read API (/v1/devices…): which dynamodb sinks hold a fleet's readings and silence events. Empty: no device API."`
}

// ServeDevices names the dynamodb sinks the device read API reads.
type ServeDevices struct {
	Readings    string `yaml:"readings" doc:"Name of a dynamodb sink fed by a readings source, pk from {symbol} (and {shard}), sort key starting with {ts}: GET /v1/devices/{id}/readings, and /latest when latest is empty."`
	Latest      string `yaml:"latest" doc:"Name of a dynamodb sink keeping one item per device (a sort key without time placeholders, e.g. \"latest\"): GET /v1/devices/{id}/latest is then one strongly consistent GetItem. Empty: the newest item of readings (one consistent Query per write shard)."`
	Status      string `yaml:"status" doc:"Name of a dynamodb sink fed by a silence processor that keeps one item per device (e.g. pk \"DEVICE#{device}\", sk \"status\"), so its level is the device's current one: GET /v1/devices?status=LEVEL."`
	StatusIndex string `yaml:"status_index" doc:"The GSI of the status sink's table whose partition key is the level attribute (required with status)."`
	History     string `yaml:"history" doc:"Name of a dynamodb sink fed by a silence processor whose pk renders from {device} alone (e.g. pk \"DEVICE#{device}\", sk \"{ts}#{event}\"): GET /v1/devices/{id}/silences, oldest first."`
}
