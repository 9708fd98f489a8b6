import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.message.Message;

import java.nio.charset.StandardCharsets;

/**
 * ACL scenario for rocketstream's broker (issue 11): a DefaultMQProducer signing every request with
 * AclClientRPCHook(new SessionCredentials(ak, sk)) sends one message and prints the outcome.
 *
 *   AclScenario --namesrv ADDR --ak ACCESS_KEY --sk SECRET_KEY [--topic T] [--group G]
 *
 * Prints one line and exits with:
 *   0  "RESULT SEND_OK msgId=... queue=..."                (the broker accepted the signed send)
 *   3  "RESULT REJECTED code=N remark=..."                 (the broker answered with an error:
 *                                                            with a wrong secret, a 4.9.8 broker answers
 *                                                            code 1 "...AclException: Check signature
 *                                                            failed for accessKey=...")
 *   1  "RESULT ERROR ..."                                   (anything else: no route, timeout, ...)
 *   2  usage
 */
public class AclScenario {
    public static void main(String[] args) {
        String namesrv = null, ak = null, sk = null, topic = "AclTopic", group = "AclScenarioProducer";
        for (int i = 0; i + 1 < args.length; i += 2) {
            switch (args[i]) {
                case "--namesrv": namesrv = args[i + 1]; break;
                case "--ak": ak = args[i + 1]; break;
                case "--sk": sk = args[i + 1]; break;
                case "--topic": topic = args[i + 1]; break;
                case "--group": group = args[i + 1]; break;
                default:
                    System.err.println("unknown option " + args[i]);
                    System.exit(2);
            }
        }
        if (namesrv == null || ak == null || sk == null) {
            System.err.println("usage: AclScenario --namesrv ADDR --ak ACCESS_KEY --sk SECRET_KEY [--topic T] [--group G]");
            System.exit(2);
        }
        DefaultMQProducer producer = new DefaultMQProducer(group, new AclClientRPCHook(new SessionCredentials(ak, sk)));
        producer.setNamesrvAddr(namesrv);
        producer.setRetryTimesWhenSendFailed(0);   // one attempt: a rejection is reported as it came
        producer.setSendMsgTimeout(10000);
        int status = 1;
        try {
            producer.start();
            Message msg = new Message(topic, "TagA", "acl-key", "hello acl".getBytes(StandardCharsets.UTF_8));
            SendResult r = producer.send(msg);
            System.out.println("RESULT " + r.getSendStatus() + " msgId=" + r.getMsgId() + " queue=" + r.getMessageQueue());
            status = "SEND_OK".equals(r.getSendStatus().name()) ? 0 : 1;
        } catch (Throwable e) {
            // a broker's error answer is an MQBrokerException, thrown as is or (when the producer counts the
            // code as retryable, as SYSTEM_ERROR) as the cause of "Send [1] times, still failed"
            Throwable t = e;
            while (t != null && !(t instanceof MQBrokerException)) {
                t = t.getCause();
            }
            if (t != null) {
                MQBrokerException b = (MQBrokerException) t;
                System.out.println("RESULT REJECTED code=" + b.getResponseCode() + " remark=" + b.getErrorMessage());
                status = 3;
            } else {
                System.out.println("RESULT ERROR " + e);
                status = 1;
            }
        } finally {
            producer.shutdown();
        }
        System.out.flush();
        System.exit(status);
    }
}
