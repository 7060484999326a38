// MM2's own client reading strait's checkpoints: prints what
// RemoteClusterUtils.translateOffsets returns, one "topic partition offset" per line.
// Run on the Kafka classpath: scripts/kafka.sh tool tests/interop/TranslateOffsets.java \
//   TARGET_BOOTSTRAP SOURCE_ALIAS GROUP
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;

import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.connect.mirror.RemoteClusterUtils;

public class TranslateOffsets {
    public static void main(String[] args) throws Exception {
        Map<String, Object> props = new HashMap<>();
        props.put("bootstrap.servers", args[0]);
        Map<TopicPartition, OffsetAndMetadata> offsets =
            RemoteClusterUtils.translateOffsets(props, args[1], args[2], Duration.ofSeconds(30));
        for (Map.Entry<TopicPartition, OffsetAndMetadata> e : offsets.entrySet()) {
            System.out.println(e.getKey().topic() + " " + e.getKey().partition() + " " + e.getValue().offset());
        }
    }
}
