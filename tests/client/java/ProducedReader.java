import java.security.MessageDigest;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import com.alibaba.fastjson.JSON;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.common.message.MessageClientExt;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * Reads back what tests/client/test_producer.py sent with our Producer, with the real 4.9.8 client:
 * a DefaultLitePullConsumer in assign mode over every queue of TOPIC from offset 0, until COUNT distinct messages
 * arrived or TIMEOUT_S passed. One JSON line per message (MessageExt fields, SHA-256 of the body as the
 * client hands it over, i.e. decompressed), then {"done": n}.
 *
 *   ProducedReader NS TOPIC COUNT TIMEOUT_S
 */
public final class ProducedReader {
    public static void main(String[] args) throws Exception {
        String ns = args[0];
        String topic = args[1];
        int count = Integer.parseInt(args[2]);
        long deadline = System.currentTimeMillis() + Long.parseLong(args[3]) * 1000L;
        DefaultLitePullConsumer c = new DefaultLitePullConsumer("capi_reader_" + System.nanoTime());
        c.setNamesrvAddr(ns);
        c.setAutoCommit(false);
        c.start();
        Collection<MessageQueue> mqs = c.fetchMessageQueues(topic);
        c.assign(mqs);
        for (MessageQueue mq : mqs) {
            c.seek(mq, 0);
        }
        int n = 0;
        // distinct messages (UNIQ_KEY): assign() starts pulling before seek() moves the queues back to 0, so the
        // first messages of a queue may come twice, and a send retried after a timeout may be stored twice; each
        // copy is printed, only distinct ones are counted
        java.util.Set<String> distinct = new java.util.HashSet<>();
        MessageDigest sha = MessageDigest.getInstance("SHA-256");
        while (n < count && System.currentTimeMillis() < deadline) {
            List<MessageExt> got = c.poll(1000);
            for (MessageExt m : got) {
                Map<String, Object> o = new LinkedHashMap<>();
                o.put("msgId", m.getMsgId());
                o.put("offsetMsgId", m instanceof MessageClientExt ? ((MessageClientExt) m).getOffsetMsgId() : m.getMsgId());
                o.put("topic", m.getTopic());
                o.put("tags", m.getTags());
                o.put("keys", m.getKeys());
                o.put("properties", new TreeMap<>(m.getProperties()));
                o.put("bodyLen", m.getBody().length);
                StringBuilder hex = new StringBuilder();
                for (byte b : sha.digest(m.getBody())) {
                    hex.append(String.format("%02x", b));
                }
                o.put("bodySha256", hex.toString());
                o.put("reconsumeTimes", m.getReconsumeTimes());
                o.put("queueId", m.getQueueId());
                o.put("queueOffset", m.getQueueOffset());
                o.put("sysFlag", m.getSysFlag());
                o.put("flag", m.getFlag());
                o.put("bornTimestamp", m.getBornTimestamp());
                o.put("brokerName", m.getBrokerName());
                System.out.println(JSON.toJSONString(o));
                if (distinct.add(m.getMsgId())) {
                    n++;
                }
            }
        }
        System.out.println("{\"done\":" + n + "}");
        System.out.flush();
        c.shutdown();
        System.exit(n >= count ? 0 : 3);
    }
}
