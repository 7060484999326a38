//! One blocking connection to a broker speaking Kafka's protocol through the `kafka-protocol`
//! crate's messages: requests go out framed with their header, answers come back in order
//! (a broker answers a connection's requests one at a time, in the order sent).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;

use anyhow::{bail, Context};
use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{ApiKey, MetadataRequest, MetadataResponse, RequestHeader, ResponseHeader, TopicName};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};

/// A broker connection.
pub struct Conn {
    stream: TcpStream,
    address: String,
    next_id: i32,
}

impl Conn {
    /// Connects to `address` (`host:port`).
    pub fn connect(address: &str) -> anyhow::Result<Self> {
        let stream = TcpStream::connect(address).with_context(|| format!("connecting to {address}"))?;
        // Requests are whole and few; waiting to coalesce them only adds a round trip.
        stream.set_nodelay(true).context("TCP_NODELAY")?;
        Ok(Self { stream, address: address.to_string(), next_id: 0 })
    }

    /// The connection as two: one to send on, one to read answers from.
    pub fn split(self) -> anyhow::Result<(Conn, Conn)> {
        let reader = Conn {
            stream: self.stream.try_clone().context("cloning a socket")?,
            address: self.address.clone(),
            next_id: 0,
        };
        Ok((self, reader))
    }

    /// Sends `request` as `api` version `version`; its answer is read with [`Conn::receive`].
    pub fn send<R: Encodable + HeaderVersion>(&mut self, api: ApiKey, version: i16, request: &R) -> anyhow::Result<()> {
        let mut header = RequestHeader::default();
        header.request_api_key = api as i16;
        header.request_api_version = version;
        header.correlation_id = self.next_id;
        header.client_id = Some(StrBytes::from_static_str("strait-passthrough"));
        self.next_id += 1;
        let mut frame = BytesMut::with_capacity(4 + request.compute_size(version)? + 64);
        frame.extend_from_slice(&[0; 4]);
        header.encode(&mut frame, R::header_version(version))?;
        request.encode(&mut frame, version)?;
        let length = i32::try_from(frame.len() - 4)?;
        frame[0..4].copy_from_slice(&length.to_be_bytes());
        self.stream.write_all(&frame).with_context(|| format!("sending {api:?} to {}", self.address))
    }

    /// Reads the next answer, of a request sent as version `version`.
    pub fn receive<R: Decodable + HeaderVersion>(&mut self, version: i16) -> anyhow::Result<R> {
        let mut length = [0u8; 4];
        self.stream.read_exact(&mut length).with_context(|| format!("reading an answer from {}", self.address))?;
        let mut body = vec![0u8; usize::try_from(i32::from_be_bytes(length))?];
        self.stream.read_exact(&mut body).with_context(|| format!("reading an answer from {}", self.address))?;
        // Bytes, so fetched records are slices of the answer rather than copies.
        let mut body = Bytes::from(body);
        ResponseHeader::decode(&mut body, R::header_version(version))?;
        R::decode(&mut body, version)
    }

    /// Sends `request` and waits for its answer.
    pub fn call<Q, A>(&mut self, api: ApiKey, version: i16, request: &Q) -> anyhow::Result<A>
    where
        Q: Encodable + HeaderVersion,
        A: Decodable + HeaderVersion,
    {
        self.send(api, version, request)?;
        self.receive(version)
    }
}

/// Where a topic's partitions lead, as a cluster answered.
pub struct Leaders {
    /// Broker id to `host:port`.
    pub brokers: BTreeMap<i32, String>,
    /// Partition to its leader's broker id.
    pub partitions: BTreeMap<i32, i32>,
}

/// Asks the cluster at `bootstrap` (its first address) which broker leads each partition of `topic`.
pub fn leaders(bootstrap: &str, topic: &str) -> anyhow::Result<Leaders> {
    let first = bootstrap.split(',').next().unwrap_or(bootstrap);
    let mut conn = Conn::connect(first)?;
    let mut wanted = MetadataRequestTopic::default();
    wanted.name = Some(TopicName(StrBytes::from_string(topic.to_string())));
    let mut request = MetadataRequest::default();
    request.topics = Some(vec![wanted]);
    let answer: MetadataResponse = conn.call(ApiKey::Metadata, 12, &request)?;
    let brokers = answer.brokers.iter().map(|b| (b.node_id.0, format!("{}:{}", &*b.host, b.port))).collect();
    let Some(t) = answer.topics.first() else { bail!("{first} did not describe {topic}") };
    if t.error_code != 0 {
        bail!("{first} answered error {} for topic {topic}: does it exist?", t.error_code);
    }
    let partitions = t.partitions.iter().map(|p| (p.partition_index, p.leader_id.0)).collect();
    Ok(Leaders { brokers, partitions })
}
